// Polling a route without blocking the page: one request at a time, a loading flag, the last
// error, and the last good answer kept while a later one fails.

import { onMounted, onUnmounted, ref, shallowRef, type Ref, type ShallowRef } from 'vue'

export interface Poll<T> {
  data: ShallowRef<T | null>
  error: Ref<string>
  loading: Ref<boolean>
  refresh: () => Promise<void>
}

export function usePoll<T>(load: () => Promise<T>, intervalMs: number): Poll<T> {
  const data = shallowRef<T | null>(null) as ShallowRef<T | null>
  const error = ref('')
  const loading = ref(true)
  let timer: ReturnType<typeof setTimeout> | undefined
  let stopped = false
  let inFlight: Promise<void> | null = null

  function refresh(): Promise<void> {
    if (inFlight) return inFlight
    inFlight = load()
      .then((v) => {
        data.value = v
        error.value = ''
      })
      .catch((e: unknown) => {
        error.value = e instanceof Error ? e.message : String(e)
      })
      .finally(() => {
        loading.value = false
        inFlight = null
      })
    return inFlight
  }

  async function loop() {
    await refresh()
    if (!stopped) timer = setTimeout(loop, intervalMs)
  }

  onMounted(loop)
  onUnmounted(() => {
    stopped = true
    clearTimeout(timer)
  })
  return { data, error, loading, refresh }
}
