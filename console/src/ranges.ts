// The history ranges the console offers: the last 15 minutes from this instance's memory (the
// live feed), and the fleet's longer ranges read from Prometheus through the admin API.

import { COLORS, reasonColor } from './charts'
import type { RangePoint } from './types'

export const LIVE_RANGE = '15m'
export const RANGES = [LIVE_RANGE, '1h', '6h', '24h', '7d'] as const
export type RangeName = (typeof RANGES)[number]

type Point = [number, number]

function pts(xs: readonly RangePoint[], f: (p: RangePoint) => number): Point[] {
  return xs.map((p) => [p.t * 1000, f(p)])
}

/** Admitted and one series per rejection reason, req/s. */
export function rangeRequests(xs: readonly RangePoint[]) {
  const reasons = new Set<string>()
  for (const p of xs) for (const [r, n] of Object.entries(p.reasons ?? {})) if (n > 0) reasons.add(r)
  return [
    { name: 'admitted', color: COLORS.admitted, points: pts(xs, (p) => p.admitted), area: true },
    ...[...reasons].sort().map((r, i) => ({
      name: `rejected: ${r}`,
      color: reasonColor(r, i),
      points: pts(xs, (p) => p.reasons?.[r] ?? 0),
      area: true,
    })),
  ]
}

/** The admitted cost, and the capacity in force (configured, learned or pinned) when there is one. */
export function rangeCost(xs: readonly RangePoint[]) {
  const out = [{ name: 'admitted cost', color: COLORS.cost, points: pts(xs, (p) => p.cost), area: true, dashed: false }]
  if (xs.some((p) => p.capacity > 0)) {
    out.push({ name: 'capacity (fleet)', color: COLORS.capacity, points: pts(xs, (p) => p.capacity), area: false, dashed: true })
  }
  return out
}

export function rangeUsage(xs: readonly RangePoint[]) {
  return [{ name: 'L1 usage', color: COLORS.usage, points: pts(xs, (p) => p.usage * 100), area: true }]
}

export function rangeInFlight(xs: readonly RangePoint[]) {
  return [{ name: 'in flight', color: COLORS.inFlight, points: pts(xs, (p) => p.in_flight), area: true }]
}
