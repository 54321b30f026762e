import { describe, expect, it } from 'vitest'
import { ApiError, Client, apiBase, appsQuery, errorFromResponse, errorFromThrown, withCluster } from '../../src/api'

function fakeFetch(status: number, body: string, seen: { url?: string; init?: RequestInit } = {}): typeof fetch {
  return (async (url: string, init: RequestInit) => {
    seen.url = url
    seen.init = init
    return new Response(body, { status })
  }) as unknown as typeof fetch
}

describe('API client', () => {
  it('finds the API next to the console', () => {
    expect(apiBase('/rate_limit/ui/')).toBe('/rate_limit/')
    expect(apiBase('/proxy/rate_limit/ui/index.html')).toBe('/proxy/rate_limit/')
    expect(apiBase('/')).toBe('/rate_limit/') // the dev server
    expect(withCluster('/rate_limit/apps', '')).toBe('/rate_limit/apps')
    expect(withCluster('/rate_limit/history?seconds=900', 'edge 1')).toBe('/rate_limit/history?seconds=900&cluster=edge%201')
  })

  it('maps a 400 with fields', () => {
    const e = errorFromResponse(400, JSON.stringify({
      error: 'invalid override for app "x": burst: must be >= guaranteed (100), got 50',
      fields: { burst: 'must be >= guaranteed (100), got 50' },
    }))
    expect(e).toBeInstanceOf(ApiError)
    expect(e.kind).toBe('http')
    expect(e.status).toBe(400)
    expect(e.message).toContain('invalid override')
    expect(e.fields).toEqual({ burst: 'must be >= guaranteed (100), got 50' })
  })

  it('maps Caddy errors, bodies that are not JSON, and empty bodies', () => {
    expect(errorFromResponse(404, '{"error":"unknown app \\"x\\""}').message).toBe('unknown app "x"')
    expect(errorFromResponse(502, '<html>bad gateway</html>').message).toBe('<html>bad gateway</html>')
    const e = errorFromResponse(503, '')
    expect(e.message).toBe('HTTP 503')
    expect(e.fields).toEqual({})
  })

  it('maps timeouts and network failures', () => {
    const t = errorFromThrown(new DOMException('aborted', 'AbortError'), 8000)
    expect(t.kind).toBe('timeout')
    expect(t.message).toContain('8 s')
    const n = errorFromThrown(new TypeError('Failed to fetch'), 8000)
    expect(n.kind).toBe('network')
    expect(n.message).toContain('Failed to fetch')
  })

  it('sends JSON with the cluster, and decodes the answer', async () => {
    const seen: { url?: string; init?: RequestInit } = {}
    const c = new Client({ base: '/rate_limit/', cluster: 'edge', fetch: fakeFetch(200, '{"id":"alpha"}', seen) })
    const v = await c.putApp('al pha', { burst: 10 })
    expect(v).toEqual({ id: 'alpha' })
    expect(seen.url).toBe('/rate_limit/apps/al%20pha?cluster=edge')
    expect(seen.init?.method).toBe('PUT')
    expect((seen.init?.headers as Record<string, string>)['Content-Type']).toBe('application/json')
    expect(seen.init?.body).toBe('{"burst":10}')
  })

  it('rejects with the ApiError of a failed call', async () => {
    const c = new Client({ base: '/rate_limit/', cluster: '', fetch: fakeFetch(400, '{"error":"bad","fields":{"guaranteed":"too big"}}') })
    await expect(c.putApp('a', { guaranteed: 1e9 })).rejects.toMatchObject({ status: 400, fields: { guaranteed: 'too big' } })
    const p = new Client({ base: '/rate_limit/', cluster: '', fetch: fakeFetch(200, 'not json') })
    await expect(p.apps()).rejects.toMatchObject({ kind: 'parse' })
  })

  it('gives up after its timeout', async () => {
    const hang = ((_url: string, init: RequestInit) =>
      new Promise((_resolve, reject) => {
        init.signal?.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')))
      })) as unknown as typeof fetch
    const c = new Client({ base: '/rate_limit/', cluster: '', timeoutMs: 20, fetch: hang })
    await expect(c.emergency()).rejects.toMatchObject({ kind: 'timeout' })
  })
})

describe('appsQuery', () => {
  it('encodes the page parameters, leaving out the defaults', () => {
    expect(appsQuery({})).toBe('')
    expect(appsQuery({ sort: 'id' })).toBe('')
    expect(appsQuery({ limit: 50, q: 'a b&c', sort: '-admitted', cursor: 'x_y' })).toBe('?limit=50&q=a+b%26c&sort=-admitted&cursor=x_y')
  })
  it('puts the cluster after the page parameters', async () => {
    const seen: { url?: string } = {}
    const c = new Client({ base: '/rate_limit/', cluster: 'c1', fetch: fakeFetch(200, '{}', seen) })
    await c.apps({ q: 'app1' })
    expect(seen.url).toBe('/rate_limit/apps?q=app1&cluster=c1')
  })
})
