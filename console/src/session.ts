// The signed-in relay key lives in this tab's sessionStorage and nowhere else: never in a URL, a cookie or
// localStorage. Closing the tab or signing out forgets it; another tab signs in on its own.

const SLOT = "specway.console.key";

export function key(): string | null {
  return sessionStorage.getItem(SLOT);
}

export function remember(secret: string): void {
  sessionStorage.setItem(SLOT, secret);
}

export function forget(): void {
  sessionStorage.removeItem(SLOT);
}
