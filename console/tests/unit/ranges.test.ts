import { describe, expect, it } from 'vitest'
import { rangeRequests, rangeUsage } from '../../src/ranges'
import type { RangePoint } from '../../src/types'

const p = (t: number, admitted: number, reasons: Record<string, number> = {}, usage = 0): RangePoint => ({
  t, admitted, rejected: Object.values(reasons).reduce((a, b) => a + b, 0), reasons, cost: 0, usage, capacity: 0, in_flight: 0, instances: 1,
})

describe('ranges', () => {
  it('charts admitted and one series per reason seen, in ms', () => {
    const s = rangeRequests([p(10, 2), p(25, 3, { app_exhausted: 1.5 })])
    expect(s.map((x) => x.name)).toEqual(['admitted', 'rejected: app_exhausted'])
    expect(s[0]!.points).toEqual([[10_000, 2], [25_000, 3]])
    expect(s[1]!.points).toEqual([[10_000, 0], [25_000, 1.5]])
  })
  it('shows usage in percent', () => {
    expect(rangeUsage([p(1, 0, {}, 0.42)])[0]!.points).toEqual([[1000, 42]])
  })
})
