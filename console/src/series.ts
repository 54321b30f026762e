// Bounded in-memory series: at most HISTORY_SECONDS samples per series, MAX_APPS app series.

import type { AppSample, Sample } from './types'

export const HISTORY_SECONDS = 900
export const MAX_APPS = 64

interface Timed {
  t: number
}

/**
 * Merges samples into a series kept sorted by t, one per second (a sample for a second already
 * there replaces it), and keeps the newest `max`. Returns the new array.
 */
export function mergeSamples<T extends Timed>(series: readonly T[], incoming: readonly T[], max = HISTORY_SECONDS): T[] {
  const last = series.length > 0 ? series[series.length - 1]!.t : -Infinity
  let out: T[]
  if (incoming.every((s) => s.t > last) && isSorted(incoming)) {
    out = series.concat(incoming)
  } else {
    const byT = new Map<number, T>()
    for (const s of series) byT.set(s.t, s)
    for (const s of incoming) byT.set(s.t, s)
    out = [...byT.values()].sort((a, b) => a.t - b.t)
  }
  return out.length > max ? out.slice(out.length - max) : out
}

function isSorted(xs: readonly Timed[]): boolean {
  for (let i = 1; i < xs.length; i++) if (xs[i]!.t <= xs[i - 1]!.t) return false
  return true
}

/** The cluster's series and the apps' series. */
export interface Series {
  samples: Sample[]
  apps: Record<string, AppSample[]>
}

/**
 * Adds per-app samples; an app beyond MAX_APPS series is left out, and the series of an app with
 * no sample in the last HISTORY_SECONDS (relative to newestT) is dropped.
 */
export function mergeApps(
  apps: Record<string, AppSample[]>,
  incoming: Record<string, AppSample[]>,
  newestT: number,
): Record<string, AppSample[]> {
  const out: Record<string, AppSample[]> = {}
  for (const [id, s] of Object.entries(apps)) {
    const last = s[s.length - 1]
    if (last && last.t > newestT - HISTORY_SECONDS) out[id] = s
  }
  for (const [id, s] of Object.entries(incoming)) {
    if (!(id in out) && Object.keys(out).length >= MAX_APPS) continue
    out[id] = mergeSamples(out[id] ?? [], s)
  }
  return out
}
