// Series for the charts from the samples: [unix ms, value] points, and the colours.

import type { AppSample, Sample } from './types'

export const COLORS = {
  admitted: '#2e7d32',
  rejected: '#c62828',
  cost: '#1565c0',
  capacity: '#616161',
  usage: '#6a1b9a',
  overload: '#ef6c00',
  emergency: '#c62828',
  tokens: '#00838f',
  inFlight: '#5d4037',
  limit: '#616161',
  borrowed: '#f9a825',
  debt: '#ad1457',
  guaranteed: '#2e7d32',
  burst: '#9e9d24',
}

/** Colours of the rejection reasons (others cycle through the rest). */
const REASON_COLORS: Record<string, string> = {
  app_exhausted: '#c62828',
  cluster_overloaded: '#ef6c00',
  emergency_blocked: '#6a1b9a',
  emergency_quota_exceeded: '#ad1457',
  connection_limit: '#5d4037',
  unknown_app: '#757575',
  invalid_app_id: '#9e9e9e',
}
const SPARE = ['#d84315', '#8e24aa', '#3949ab', '#00897b']

export function reasonColor(reason: string, i: number): string {
  return REASON_COLORS[reason] ?? SPARE[i % SPARE.length]!
}

type Point = [number, number]

export function points<T extends { t: number }>(xs: readonly T[], f: (s: T) => number): Point[] {
  return xs.map((s) => [s.t * 1000, f(s)])
}

/** Every rejection reason present in the samples, sorted. */
export function reasonsOf(xs: readonly { reasons: Record<string, number> }[]): string[] {
  const seen = new Set<string>()
  for (const s of xs) for (const [r, n] of Object.entries(s.reasons ?? {})) if (n > 0) seen.add(r)
  return [...seen].sort()
}

/** Admitted and one series per rejection reason (per second = req/s). */
export function requestSeries(xs: readonly (Sample | AppSample)[]) {
  const out = [{ name: 'admitted', color: COLORS.admitted, points: points(xs, (s) => s.allowed), area: true }]
  reasonsOf(xs).forEach((r, i) => {
    out.push({ name: `rejected: ${r}`, color: reasonColor(r, i), points: points(xs, (s) => s.reasons?.[r] ?? 0), area: true })
  })
  return out
}

/**
 * The y-axis maximum of a chart with horizontal marks at values: the data's, raised so that
 * every mark is in view (an axis fitted to the data hid the 90 % overload line at 7 % usage),
 * to a round value (95 % shows as 100 %, not 99.75 %; 97 % as 110 %). Undefined without marks: the axis fits
 * the data.
 */
export function axisMaxWithMarks(values: number[]): ((extent: { max: number }) => number) | undefined {
  if (values.length === 0) return undefined
  const top = roundUp(Math.max(...values) * 1.05)
  return (extent) => Math.max(extent.max, top)
}

/** roundUp is v rounded up to a tenth of its order of magnitude (99.75 → 100, 101.85 → 110). */
export function roundUp(v: number): number {
  if (!(v > 0)) return v
  const unit = 10 ** (Math.floor(Math.log10(v)) - 1)
  return Math.round(Math.ceil(v / unit) * unit * 1e9) / 1e9
}
