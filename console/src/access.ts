// Whether this console may change anything: a console served on a site without allow_changes
// is read-only (its API refuses changes with 403), and then hides its editing controls.

import { ref } from 'vue'
import { api } from './api'

/** True once the API said it refuses changes; false until then and for the admin endpoint. */
export const readOnly = ref(false)

/** Asks the API once (GET /rate_limit/ says read_only); a failure leaves the controls shown. */
export async function loadAccess(): Promise<void> {
  try {
    readOnly.value = (await api.overview()).read_only === true
  } catch {
    // The views show the API's errors themselves; a change would answer 403 with the reason.
  }
}

/** The note shown instead of an editing control. */
export const READ_ONLY_NOTE =
  'Read-only: this console is served on a site without allow_changes. Change it through the admin endpoint, or allow changes on the site.'
