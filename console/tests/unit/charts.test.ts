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
  it('rounds up to half an order of magnitude', () => {
    expect(roundUp(99.75)).toBe(100)
    expect(roundUp(7.3)).toBe(7.5)
    expect(roundUp(1200)).toBe(1500)
    expect(roundUp(0)).toBe(0)
  })
})
