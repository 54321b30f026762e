import { defineConfig } from '@playwright/test'

// Browser end-to-end tests against a real Caddy, run by the Go test e2e/console_test.go
// (TestConsoleBrowser), which starts Caddy with traffic and sets CONSOLE_URL and SITE_URL.
// The browser is the system's Chromium (Debian's `chromium`): nothing is downloaded.
export default defineConfig({
  testDir: 'tests/e2e',
  timeout: 90_000,
  workers: 1,
  retries: 0,
  reporter: 'list',
  use: {
    viewport: { width: 1280, height: 800 },
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    },
  },
})
