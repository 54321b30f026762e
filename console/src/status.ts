// Status thresholds: normal / warning / critical, as the views colour them.

import type { AppSample, LiveFigures } from './types'

export type Status = 'normal' | 'warning' | 'critical'

/** L1 usage at or above this is overload (the limiter starts degrading). */
export const OVERLOAD = 0.9

/** An app admitting at least this share of its guaranteed rate (or of its in-flight limit) is near its quota. */
export const NEAR_QUOTA = 0.8

/** The window, in samples (seconds), over which an app's status is judged. */
export const STATUS_WINDOW = 10

/** L1 usage against capacity: critical at the emergency threshold, warning from overload on. */
export function usageStatus(usage: number, emergencyThreshold: number): Status {
  if (usage >= emergencyThreshold) return 'critical'
  if (usage >= OVERLOAD) return 'warning'
  return 'normal'
}

/** Degradation level 0 normal, 1 mild, 2 significant, 3 fail_open. */
export function levelStatus(level: number): Status {
  if (level <= 0) return 'normal'
  return level === 1 ? 'warning' : 'critical'
}

export const LEVEL_NAMES = ['normal', 'mild', 'significant', 'fail_open']

export function levelName(level: number): string {
  return LEVEL_NAMES[level] ?? `level ${level}`
}

/** The average per-second rates of the last `window` samples. */
export function rates(samples: readonly { allowed: number; rejected: number; cost: number }[], window = STATUS_WINDOW) {
  const recent = samples.slice(-window)
  const n = Math.max(recent.length, 1)
  let allowed = 0
  let rejected = 0
  let cost = 0
  for (const s of recent) {
    allowed += s.allowed
    rejected += s.rejected
    cost += s.cost
  }
  return { allowed: allowed / n, rejected: rejected / n, cost: cost / n }
}

/**
 * An app's status from its recent samples: critical when any request was rejected in the
 * window, warning when its admitted cost reaches NEAR_QUOTA of its guaranteed rate or its
 * in-flight count NEAR_QUOTA of its limit, normal otherwise.
 */
export function appStatus(samples: AppSample[], window = STATUS_WINDOW): Status {
  if (samples.length === 0) return 'normal'
  const r = rates(samples, window)
  if (r.rejected > 0) return 'critical'
  const last = samples[samples.length - 1]!
  if (last.guaranteed > 0 && r.cost >= NEAR_QUOTA * last.guaranteed) return 'warning'
  if (last.limit > 0 && last.in_flight >= NEAR_QUOTA * last.limit) return 'warning'
  return 'normal'
}

/**
 * An app's status from the API's live figures over `windowSeconds` (a page of the app list):
 * the thresholds of appStatus.
 */
export function liveStatus(
  live: LiveFigures,
  windowSeconds: number,
  guaranteed: number,
  inFlight: number,
  limit: number,
): Status {
  if (live.rejected > 0) return 'critical'
  const cost = live.cost / Math.max(windowSeconds, 1)
  if (guaranteed > 0 && cost >= NEAR_QUOTA * guaranteed) return 'warning'
  if (limit > 0 && inFlight >= NEAR_QUOTA * limit) return 'warning'
  return 'normal'
}
