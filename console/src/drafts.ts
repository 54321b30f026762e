// Form drafts that outlive their view: the console is one page, and an operator who looks at
// another view while preparing a change comes back to what they left.
import { reactive } from 'vue'

/** The emergency being prepared: its reason and duration ('' = until deactivated). */
export const emergencyDraft = reactive({ reason: '', duration: '15m' })
