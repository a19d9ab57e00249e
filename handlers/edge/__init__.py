"""The HTTP edge: the app factory, the Connexion adapter, request ids and body limits, and what the generated
routes call (key check, body parsing). Nothing here knows a wire format."""
