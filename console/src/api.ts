// The one client of the admin API. Every call has a timeout; every failure is an ApiError.

import type {
  AppsView, AppView, ClusterPolicy, ClusterPolicyView, ClusterView, ConnectionsView, Emergency,
  AuditView, HistoryView, Policy, RangeView, RemovedView,
} from './types'

export const DEFAULT_TIMEOUT_MS = 8000

export type ErrorKind = 'http' | 'timeout' | 'network' | 'parse'

/** A failed call: the API's status and message, and for a 400 the bad fields by name. */
export class ApiError extends Error {
  readonly kind: ErrorKind
  readonly status: number
  readonly fields: Record<string, string>

  constructor(kind: ErrorKind, status: number, message: string, fields: Record<string, string> = {}) {
    super(message)
    this.name = 'ApiError'
    this.kind = kind
    this.status = status
    this.fields = fields
  }
}

/**
 * The API's base path for a console page at `pathname`: the console lives at
 * <prefix>/rate_limit/ui/, the API at <prefix>/rate_limit/ (so a reverse proxy with a path
 * prefix works). Anywhere else (the dev server) it is /rate_limit/.
 */
export function apiBase(pathname: string): string {
  const i = pathname.lastIndexOf('/ui/')
  return i >= 0 ? pathname.slice(0, i + 1) : '/rate_limit/'
}

/** The path with ?cluster=<id> added (when a cluster is chosen). */
export function withCluster(path: string, cluster: string): string {
  if (!cluster) return path
  return path + (path.includes('?') ? '&' : '?') + 'cluster=' + encodeURIComponent(cluster)
}

/** Builds the ApiError for an HTTP answer that is not 2xx, from its body. */
export function errorFromResponse(status: number, body: string): ApiError {
  let message = ''
  let fields: Record<string, string> = {}
  try {
    const parsed: unknown = JSON.parse(body)
    if (parsed && typeof parsed === 'object') {
      const o = parsed as { error?: unknown; fields?: unknown }
      if (typeof o.error === 'string') message = o.error
      if (o.fields && typeof o.fields === 'object') {
        fields = Object.fromEntries(
          Object.entries(o.fields as Record<string, unknown>).map(([k, v]) => [k, String(v)]),
        )
      }
    }
  } catch {
    message = body.trim().slice(0, 300)
  }
  if (!message) message = `HTTP ${status}`
  return new ApiError('http', status, message, fields)
}

/** Maps what fetch threw (abort by our timeout, a network failure) to an ApiError. */
export function errorFromThrown(e: unknown, timeoutMs: number): ApiError {
  if (e instanceof ApiError) return e
  if (e instanceof DOMException && (e.name === 'AbortError' || e.name === 'TimeoutError')) {
    return new ApiError('timeout', 0, `the admin API did not answer within ${timeoutMs / 1000} s`)
  }
  const detail = e instanceof Error ? e.message : String(e)
  return new ApiError('network', 0, `cannot reach the admin API (${detail})`)
}

/** The parameters of GET /rate_limit/apps. */
export interface AppsQuery {
  limit?: number
  cursor?: string
  q?: string
  sort?: string
}

/** The query string of an AppsQuery ("" for none). */
export function appsQuery(page: AppsQuery): string {
  const p = new URLSearchParams()
  if (page.limit) p.set('limit', String(page.limit))
  if (page.q) p.set('q', page.q)
  if (page.sort && page.sort !== 'id') p.set('sort', page.sort)
  if (page.cursor) p.set('cursor', page.cursor)
  const s = p.toString()
  return s ? '?' + s : ''
}

export interface ClientOptions {
  base: string
  cluster: string
  timeoutMs?: number
  fetch?: typeof fetch
}

export class Client {
  readonly base: string
  readonly cluster: string
  private readonly timeoutMs: number
  private readonly fetchFn: typeof fetch

  constructor(opts: ClientOptions) {
    this.base = opts.base
    this.cluster = opts.cluster
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init))
  }

  /** The URL of a route (relative to the API's base), with the cluster. */
  url(path: string): string {
    return withCluster(this.base + path, this.cluster)
  }

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const ctrl = new AbortController()
    const timer = setTimeout(() => ctrl.abort(), this.timeoutMs)
    try {
      const init: RequestInit = { method, signal: ctrl.signal, headers: { Accept: 'application/json' } }
      if (body !== undefined) {
        init.headers = { Accept: 'application/json', 'Content-Type': 'application/json' }
        init.body = JSON.stringify(body)
      }
      const resp = await this.fetchFn(this.url(path), init)
      const text = await resp.text()
      if (!resp.ok) throw errorFromResponse(resp.status, text)
      try {
        return JSON.parse(text) as T
      } catch {
        throw new ApiError('parse', resp.status, `the admin API answered ${path} with something that is not JSON`)
      }
    } catch (e) {
      throw errorFromThrown(e, this.timeoutMs)
    } finally {
      clearTimeout(timer)
    }
  }

  overview(): Promise<ClusterView> {
    return this.call('GET', '')
  }
  /** One page of apps: `sort` is a key with an optional "-" prefix; `cursor` a page's next_cursor. */
  apps(page: AppsQuery = {}): Promise<AppsView> {
    return this.call('GET', 'apps' + appsQuery(page))
  }
  app(id: string): Promise<AppView> {
    return this.call('GET', 'apps/' + encodeURIComponent(id))
  }
  putApp(id: string, body: Partial<Policy>): Promise<AppView> {
    return this.call('PUT', 'apps/' + encodeURIComponent(id), body)
  }
  deleteApp(id: string): Promise<AppView | RemovedView> {
    return this.call('DELETE', 'apps/' + encodeURIComponent(id))
  }
  clusterPolicy(id: string): Promise<ClusterPolicyView> {
    return this.call('GET', 'clusters/' + encodeURIComponent(id))
  }
  putClusterPolicy(id: string, body: Partial<ClusterPolicy>): Promise<ClusterPolicyView> {
    return this.call('PUT', 'clusters/' + encodeURIComponent(id), body)
  }
  deleteClusterPolicy(id: string): Promise<ClusterPolicyView> {
    return this.call('DELETE', 'clusters/' + encodeURIComponent(id))
  }
  /** A page of the connections, the apps with the most in flight first. */
  connections(limit: number): Promise<ConnectionsView> {
    return this.call('GET', 'connections?sort=-in_flight&limit=' + limit)
  }
  emergency(): Promise<Emergency> {
    return this.call('GET', 'emergency')
  }
  activate(reason: string, duration: string): Promise<Emergency> {
    const body: { reason: string; duration?: string } = { reason }
    if (duration) body.duration = duration
    return this.call('POST', 'emergency/activate', body)
  }
  deactivate(): Promise<Emergency> {
    return this.call('POST', 'emergency/deactivate')
  }
  history(seconds: number, apps: string[] = []): Promise<HistoryView> {
    const q = [`seconds=${seconds}`, ...apps.map((a) => 'app=' + encodeURIComponent(a))].join('&')
    return this.call('GET', 'history?' + q)
  }
  streamURL(): string {
    return this.url('stream')
  }
  /** A long range (1h, 6h, 24h, 7d) of the fleet or one app, read from Prometheus by the API. */
  historyRange(range: string, app = ''): Promise<RangeView> {
    return this.call('GET', `history?range=${encodeURIComponent(range)}` + (app ? '&app=' + encodeURIComponent(app) : ''))
  }
  /** Enables or disables an app fleet-wide (its policy override is kept). */
  setEnabled(id: string, enabled: boolean): Promise<AppView> {
    return this.call('PUT', 'apps/' + encodeURIComponent(id), { enabled })
  }
  audit(limit = 200): Promise<AuditView> {
    return this.call('GET', `audit?limit=${limit}`)
  }
}

function pageClient(): Client {
  const loc = typeof location === 'undefined' ? undefined : location
  const cluster = loc ? (new URLSearchParams(loc.search).get('cluster') ?? '') : ''
  return new Client({ base: apiBase(loc?.pathname ?? '/rate_limit/ui/'), cluster })
}

/** The page's client: the API next to the console, the cluster from the page's ?cluster=. */
export const api = pageClient()
