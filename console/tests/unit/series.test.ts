import { describe, expect, it } from 'vitest'
import { HISTORY_SECONDS, MAX_APPS, mergeApps, mergeSamples } from '../../src/series'
import type { AppSample } from '../../src/types'

const at = (t: number) => ({ t })
const app = (t: number) => ({ t }) as AppSample

describe('bounded series', () => {
  it('appends newer samples and keeps at most 900', () => {
    let s = mergeSamples([], Array.from({ length: 900 }, (_, i) => at(i)))
    expect(s.length).toBe(HISTORY_SECONDS)
    s = mergeSamples(s, [at(900), at(901)])
    expect(s.length).toBe(HISTORY_SECONDS)
    expect(s[0]!.t).toBe(2)
    expect(s[s.length - 1]!.t).toBe(901)
  })
  it('merges overlapping history by second, sorted', () => {
    const s = mergeSamples([at(5), at(6), at(7)], [at(3), at(6), at(8)])
    expect(s.map((x) => x.t)).toEqual([3, 5, 6, 7, 8])
  })
  it('keeps at most 64 app series and drops those silent for 15 minutes', () => {
    const many: Record<string, AppSample[]> = {}
    for (let i = 0; i < MAX_APPS + 5; i++) many['app' + i] = [app(1000)]
    expect(Object.keys(mergeApps({}, many, 1000)).length).toBe(MAX_APPS)
    const kept = mergeApps({ old: [app(10)], recent: [app(990)] }, { fresh: [app(1000)] }, 1000)
    expect(Object.keys(kept).sort()).toEqual(['fresh', 'recent'])
  })
})
