import { describe, expect, it } from 'vitest'
import { OVERLOAD, appStatus, levelName, levelStatus, liveStatus, rates, usageStatus } from '../../src/status'
import type { AppSample } from '../../src/types'

function sample(t: number, o: Partial<AppSample> = {}): AppSample {
  return {
    t, allowed: 10, rejected: 0, reasons: {}, cost: 10, local_tokens: 50, in_flight: 0, limit: 100,
    borrowed: 0, debt: 0, guaranteed: 100, burst: 200, ...o,
  }
}

describe('status thresholds', () => {
  it('L1 usage: warning from overload (0.9), critical at the emergency threshold', () => {
    expect(OVERLOAD).toBe(0.9)
    expect(usageStatus(0.89, 0.95)).toBe('normal')
    expect(usageStatus(0.9, 0.95)).toBe('warning')
    expect(usageStatus(0.95, 0.95)).toBe('critical')
    expect(usageStatus(0.8, 0.8)).toBe('critical') // a threshold below overload wins
  })
  it('degradation levels', () => {
    expect([0, 1, 2, 3].map(levelStatus)).toEqual(['normal', 'warning', 'critical', 'critical'])
    expect(levelName(3)).toBe('fail_open')
    expect(levelName(7)).toBe('level 7')
  })
  it('an app is critical when it had rejections in the window', () => {
    const s = Array.from({ length: 20 }, (_, i) => sample(i))
    expect(appStatus(s)).toBe('normal')
    s[15] = sample(15, { rejected: 1, reasons: { app_exhausted: 1 } })
    expect(appStatus(s)).toBe('critical')
    // a rejection older than the window no longer counts
    expect(appStatus(s.slice(0, 16).concat(Array.from({ length: 10 }, (_, i) => sample(16 + i))))).toBe('normal')
  })
  it('an app is warning near its quota: cost ≥ 80 % of guaranteed, or in flight ≥ 80 % of its limit', () => {
    expect(appStatus([sample(1, { cost: 79 })])).toBe('normal')
    expect(appStatus([sample(1, { cost: 80 })])).toBe('warning')
    expect(appStatus([sample(1, { in_flight: 80 })])).toBe('warning')
    expect(appStatus([sample(1, { cost: 500, guaranteed: 0 })])).toBe('normal') // no guarantee: nothing to be near
    expect(appStatus([])).toBe('normal')
  })
  it('rates average the last samples', () => {
    const s = [sample(1, { allowed: 100 }), sample(2, { allowed: 2 }), sample(3, { allowed: 4, rejected: 2 })]
    expect(rates(s, 2)).toEqual({ allowed: 3, rejected: 1, cost: 10 })
    expect(rates([], 10)).toEqual({ allowed: 0, rejected: 0, cost: 0 })
  })
})

describe('liveStatus', () => {
  it('is critical with a rejection, warning near the guaranteed rate or the in-flight limit', () => {
    expect(liveStatus({ allowed: 10, rejected: 1, cost: 10 }, 10, 100, 0, 0)).toBe('critical')
    expect(liveStatus({ allowed: 90, rejected: 0, cost: 90 }, 10, 10, 0, 0)).toBe('warning')
    expect(liveStatus({ allowed: 70, rejected: 0, cost: 70 }, 10, 10, 0, 0)).toBe('normal')
    expect(liveStatus({ allowed: 0, rejected: 0, cost: 0 }, 10, 10, 8, 10)).toBe('warning')
  })
})
