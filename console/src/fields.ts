// Edit forms: the values as typed, the body of the PUT, and the API's "fields" errors on them.

import { ApiError } from './api'

export interface FormErrors {
  /** Messages by form field. */
  fields: Record<string, string>
  /** What belongs to no field of the form (the API's message, a timeout, …). */
  general: string
}

/** The field an API field name belongs to: "emergency_ratios[2]" and "emergency_ratios.2" → "emergency_ratios". */
export function baseField(name: string): string {
  const m = /^[A-Za-z_]+/.exec(name)
  return m ? m[0] : name
}

/**
 * Maps a failed save to the form: each "fields" entry of a 400 on its field (when the form has
 * it), the rest, and any other error, as the general message.
 */
export function formErrors(err: unknown, formFields: readonly string[]): FormErrors {
  const out: FormErrors = { fields: {}, general: '' }
  if (!(err instanceof ApiError)) {
    out.general = err instanceof Error ? err.message : String(err)
    return out
  }
  const rest: string[] = []
  for (const [name, problem] of Object.entries(err.fields)) {
    const f = baseField(name)
    if (formFields.includes(f)) {
      out.fields[f] = out.fields[f] ? `${out.fields[f]}; ${problem}` : problem
    } else {
      rest.push(`${name}: ${problem}`)
    }
  }
  if (Object.keys(err.fields).length === 0) out.general = err.message
  else if (rest.length > 0) out.general = rest.join('; ')
  return out
}

export type Kind = 'number' | 'integer' | 'duration' | 'ratios'

/** Parses one form value; a string is the error. */
export function parseValue(kind: Kind, raw: string): number | string | number[] | { error: string } {
  const s = raw.trim()
  if (kind === 'duration') {
    if (!/^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h|d))+$/.test(s)) return { error: 'a duration such as 30s, 5m or 1h' }
    return s
  }
  if (kind === 'ratios') {
    const parts = s.split(/[\s,]+/).filter((p) => p !== '')
    const nums = parts.map(Number)
    if (nums.length === 0 || nums.some((n) => !Number.isFinite(n))) return { error: 'numbers separated by commas' }
    return nums
  }
  if (s === '') return { error: 'required' }
  const n = Number(s)
  if (!Number.isFinite(n)) return { error: 'must be a number' }
  if (kind === 'integer' && !Number.isInteger(n)) return { error: 'must be a whole number' }
  return n
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b)
}

/**
 * The body of a PUT from the form: every field the operator changed from the effective value,
 * and every field the current override already sets (a PUT replaces the override; a field left
 * out returns to the config's value). Fields that do not parse are errors and not sent.
 */
export function overrideBody(
  form: Record<string, string>,
  kinds: Record<string, Kind>,
  effective: Record<string, unknown>,
  override: Record<string, unknown> | null,
): { body: Record<string, unknown>; errors: Record<string, string> } {
  const body: Record<string, unknown> = {}
  const errors: Record<string, string> = {}
  for (const [name, kind] of Object.entries(kinds)) {
    const v = parseValue(kind, form[name] ?? '')
    if (typeof v === 'object' && !Array.isArray(v)) {
      errors[name] = v.error
      continue
    }
    const overridden = override !== null && name in override
    if (overridden || !same(v, effective[name])) body[name] = v
  }
  return { body, errors }
}

/** The form's text for a value. */
export function formText(v: unknown): string {
  if (Array.isArray(v)) return v.join(', ')
  return v === undefined || v === null ? '' : String(v)
}
