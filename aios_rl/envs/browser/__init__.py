"""The browser environment: web flows on the local ``sites`` service and MiniWoB++ tasks, in
real Chromium driven by Playwright."""
