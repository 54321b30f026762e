// Numbers as an operator reads them: short, with their unit.

/** A plain number: integers as is (with thousands separators), others with up to 2 decimals. */
export function formatNumber(n: number): string {
  if (!Number.isFinite(n)) return '–'
  const abs = Math.abs(n)
  if (abs >= 1e9) return trim(n / 1e9) + 'G'
  if (abs >= 1e6) return trim(n / 1e6) + 'M'
  if (abs >= 1e4) return trim(n / 1e3) + 'k'
  if (Number.isInteger(n)) return n.toLocaleString('en-US')
  return trim(n)
}

function trim(n: number): string {
  const abs = Math.abs(n)
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : 2
  return String(Number(n.toFixed(digits)))
}

/** A rate with its unit: formatRate(12.5, 'req/s') = "12.5 req/s". */
/** An exact count (of apps, rows): formatNumber rounds from 10 000 on. */
export function formatCount(n: number): string {
  return n.toLocaleString('en-US')
}

export function formatRate(n: number, unit: 'req/s' | 'tokens/s'): string {
  return `${formatNumber(n)} ${unit}`
}

/** A ratio (0..1) as a percentage: formatPercent(0.423) = "42.3 %". */
export function formatPercent(ratio: number): string {
  if (!Number.isFinite(ratio)) return '–'
  const p = ratio * 100
  const digits = Math.abs(p) >= 100 || Number.isInteger(p) ? 0 : 1
  return `${p.toFixed(digits)} %`
}

/** Tokens (a level, not a rate). */
export function formatTokens(n: number): string {
  return `${formatNumber(n)} tokens`
}

/** Seconds as "1.2 ms", "340 µs", "2.5 s". */
export function formatSeconds(s: number): string {
  if (!Number.isFinite(s)) return '–'
  if (s === 0) return '0 s'
  if (s < 1e-3) return `${trim(s * 1e6)} µs`
  if (s < 1) return `${trim(s * 1e3)} ms`
  return `${trim(s)} s`
}

/** A unix time (seconds) as the local wall-clock time "14:03:07". */
export function formatClock(t: number): string {
  const d = new Date(t * 1000)
  const pad = (x: number) => String(x).padStart(2, '0')
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
}

/** How long until an ISO time, from now (ms): "4 min 10 s", or "" when past. */
export function formatRemaining(untilISO: string, nowMs: number): string {
  const left = Math.round((Date.parse(untilISO) - nowMs) / 1000)
  if (!Number.isFinite(left) || left <= 0) return ''
  const h = Math.floor(left / 3600)
  const m = Math.floor((left % 3600) / 60)
  const s = left % 60
  if (h > 0) return `${h} h ${m} min`
  if (m > 0) return `${m} min ${s} s`
  return `${s} s`
}
