import { describe, expect, it } from 'vitest'
import { axisMaxWithMarks } from '../../src/charts'

describe('axis with marks', () => {
  it('fits the data when there are no marks', () => {
    expect(axisMaxWithMarks([])).toBeUndefined()
  })
  it('raises the axis to show the highest mark', () => {
    const max = axisMaxWithMarks([90, 95])!
    expect(max({ max: 7 })).toBeCloseTo(99.75)
    expect(max({ max: 140 })).toBe(140)
  })
})
