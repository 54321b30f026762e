import { describe, expect, it } from 'vitest'
import { formatClock, formatNumber, formatPercent, formatRate, formatRemaining, formatSeconds } from '../../src/format'

describe('format', () => {
  it('numbers: integers with separators, large ones with a suffix, others with 2 significant decimals', () => {
    expect(formatNumber(0)).toBe('0')
    expect(formatNumber(1234)).toBe('1,234')
    expect(formatNumber(12345)).toBe('12.3k')
    expect(formatNumber(2_500_000)).toBe('2.5M')
    expect(formatNumber(3.14159)).toBe('3.14')
    expect(formatNumber(42.56)).toBe('42.6')
    expect(formatNumber(Number.NaN)).toBe('–')
  })
  it('rates carry their unit', () => {
    expect(formatRate(12.5, 'req/s')).toBe('12.5 req/s')
    expect(formatRate(1000, 'tokens/s')).toBe('1,000 tokens/s')
  })
  it('percentages from ratios', () => {
    expect(formatPercent(0.423)).toBe('42.3 %')
    expect(formatPercent(0.9)).toBe('90 %')
    expect(formatPercent(1.234)).toBe('123 %')
    expect(formatPercent(Number.POSITIVE_INFINITY)).toBe('–')
  })
  it('seconds in the best unit', () => {
    expect(formatSeconds(0.0004)).toBe('400 µs')
    expect(formatSeconds(0.0012)).toBe('1.2 ms')
    expect(formatSeconds(2.5)).toBe('2.5 s')
    expect(formatSeconds(0)).toBe('0 s')
  })
  it('clock and remaining time', () => {
    expect(formatClock(0)).toMatch(/^\d\d:\d\d:\d\d$/)
    const now = Date.parse('2026-01-01T00:00:00Z')
    expect(formatRemaining('2026-01-01T00:04:10Z', now)).toBe('4 min 10 s')
    expect(formatRemaining('2026-01-01T02:30:00Z', now)).toBe('2 h 30 min')
    expect(formatRemaining('2025-12-31T23:59:00Z', now)).toBe('')
  })
})
