// Hash routing: #/ dashboard, #/apps, #/apps/<id>, #/cluster, #/emergency, #/audit.

import { ref } from 'vue'

export type Route =
  | { name: 'dashboard' }
  | { name: 'apps' }
  | { name: 'app'; id: string }
  | { name: 'cluster' }
  | { name: 'emergency' }
  | { name: 'audit' }
  | { name: 'unknown'; path: string }

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, '') || '/'
  if (path === '/' || path === '/dashboard') return { name: 'dashboard' }
  if (path === '/apps') return { name: 'apps' }
  const m = /^\/apps\/(.+)$/.exec(path)
  if (m) return { name: 'app', id: decodeURIComponent(m[1]!) }
  if (path === '/cluster') return { name: 'cluster' }
  if (path === '/emergency') return { name: 'emergency' }
  if (path === '/audit') return { name: 'audit' }
  return { name: 'unknown', path }
}

export function appHref(id: string): string {
  return '#/apps/' + encodeURIComponent(id)
}

export const route = ref<Route>(parseRoute(typeof location === 'undefined' ? '' : location.hash))

if (typeof window !== 'undefined') {
  window.addEventListener('hashchange', () => {
    route.value = parseRoute(location.hash)
  })
}
