"""The operator console at /console: static files (an HTML page, a stylesheet and the bundled script built from
console/src) served by the gateway itself, under a strict Content-Security-Policy. The script calls the API with the
key signed in to its tab; the gateway holds no console session and grants the console nothing. docs/console.md."""
