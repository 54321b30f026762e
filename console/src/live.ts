// The live feed: the history on page open, then the stream; a bounded copy in memory, and the
// feed's state for the indicator (live / stale / disconnected).

import { reactive, shallowRef } from 'vue'
import { api } from './api'
import { HISTORY_SECONDS, mergeApps, mergeSamples } from './series'
import type { AppSample, Sample, StreamEvent } from './types'

export type FeedState = 'loading' | 'live' | 'stale' | 'disconnected'

/** No event for this long: the feed is stale. */
export const STALE_AFTER_MS = 3500

export const feed = reactive({
  state: 'loading' as FeedState,
  error: '',
  cluster: '',
  lastEventAt: 0,
})

/** The series (replaced, not mutated, on every change: charts watch the reference). */
export const samples = shallowRef<Sample[]>([])
export const appSeries = shallowRef<Record<string, AppSample[]>>({})

let source: EventSource | null = null
let staleTimer: ReturnType<typeof setInterval> | null = null
let started = false

function newest(): number {
  const s = samples.value
  return s.length > 0 ? s[s.length - 1]!.t : 0
}

/** Loads the history (the last 15 minutes, or the given apps') and merges it in. */
export async function loadHistory(apps: string[] = []): Promise<void> {
  const h = await api.history(HISTORY_SECONDS, apps)
  feed.cluster = h.cluster
  samples.value = mergeSamples(samples.value, h.samples)
  appSeries.value = mergeApps(appSeries.value, h.apps, newest())
}

function onSnapshot(ev: MessageEvent<string>) {
  let e: StreamEvent
  try {
    e = JSON.parse(ev.data) as StreamEvent
  } catch {
    return
  }
  feed.cluster = e.cluster
  feed.lastEventAt = Date.now()
  feed.state = 'live'
  feed.error = ''
  samples.value = mergeSamples(samples.value, [e.sample])
  const incoming: Record<string, AppSample[]> = {}
  for (const [id, s] of Object.entries(e.apps ?? {})) incoming[id] = [s]
  appSeries.value = mergeApps(appSeries.value, incoming, e.sample.t)
}

function openStream() {
  source?.close()
  source = new EventSource(api.streamURL())
  source.addEventListener('snapshot', onSnapshot as EventListener)
  source.onerror = () => {
    feed.state = 'disconnected'
    feed.error = 'the live stream is disconnected; reconnecting…'
    if (source && source.readyState === EventSource.CLOSED) {
      // The browser gave up (an HTTP error such as 503): try again in a few seconds.
      source = null
      setTimeout(openStream, 5000)
    }
  }
  source.onopen = () => {
    // A reconnection: fill the gap from the history (in the background).
    if (newest() > 0) loadHistory().catch(() => undefined)
  }
}

/** Starts the feed once: the history first (charts have the last 15 minutes at once), then the stream. */
export function startFeed(): void {
  if (started) return
  started = true
  loadHistory()
    .catch((e: unknown) => {
      feed.error = `history: ${e instanceof Error ? e.message : String(e)}`
    })
    .finally(openStream)
  staleTimer = setInterval(() => {
    if (feed.state === 'live' && Date.now() - feed.lastEventAt > STALE_AFTER_MS) feed.state = 'stale'
  }, 1000)
}

export function stopFeed(): void {
  source?.close()
  source = null
  if (staleTimer) clearInterval(staleTimer)
  staleTimer = null
  started = false
}
