import { defineConfig } from 'vite'
import vue from '@vitejs/plugin-vue'

// The console is served by Caddy's admin API at /rate_limit/ui/: relative asset paths, and the
// dev server forwards /rate_limit/ to an admin endpoint (TIERBUCKET_ADMIN, default localhost:2019).
export default defineConfig({
  base: './',
  plugins: [vue()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 900,
  },
  server: {
    proxy: {
      '/rate_limit/': {
        target: process.env.TIERBUCKET_ADMIN ?? 'http://localhost:2019',
        changeOrigin: true,
      },
    },
  },
})
