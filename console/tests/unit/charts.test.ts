import { describe, expect, it } from 'vitest'
import { axisMaxWithMarks, roundUp } from '../../src/charts'

describe('axis with marks', () => {
  it('fits the data when there are no marks', () => {
    expect(axisMaxWithMarks([])).toBeUndefined()
  })
  it('raises the axis to show the highest mark', () => {
    const max = axisMaxWithMarks([90, 95])!
    expect(max({ max: 7 })).toBe(100)
    expect(max({ max: 140 })).toBe(140)
  })
})

describe('round axis maxima', () => {
  it('rounds up to a tenth of an order of magnitude', () => {
    expect(roundUp(99.75)).toBe(100)
    expect(roundUp(101.85)).toBe(110)
    expect(roundUp(7.31)).toBe(7.4)
    expect(roundUp(1200)).toBe(1200)
    expect(roundUp(0)).toBe(0)
  })
})
