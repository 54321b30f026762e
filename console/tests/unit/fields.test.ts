import { describe, expect, it } from 'vitest'
import { ApiError } from '../../src/api'
import { baseField, formErrors, formText, overrideBody, parseValue, type Kind } from '../../src/fields'

const APP_FIELDS = ['guaranteed', 'burst', 'priority', 'max_borrow', 'max_connections', 'warmup']
const KINDS: Record<string, Kind> = {
  guaranteed: 'number', burst: 'number', priority: 'integer', max_borrow: 'number', max_connections: 'integer', warmup: 'duration',
}
const EFFECTIVE = { guaranteed: 100, burst: 200, priority: 1, max_borrow: 0, max_connections: 50, warmup: '0s' }

function formOf(v: Record<string, unknown>): Record<string, string> {
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, formText(x)]))
}

describe('fields errors', () => {
  it('puts each of the API fields on its form field', () => {
    const err = new ApiError('http', 400, 'invalid override', { burst: 'must be >= guaranteed (100), got 50', priority: 'must be 0 to 3' })
    expect(formErrors(err, APP_FIELDS)).toEqual({
      fields: { burst: 'must be >= guaranteed (100), got 50', priority: 'must be 0 to 3' },
      general: '',
    })
  })
  it('keeps fields the form does not have, and other errors, as the general message', () => {
    const err = new ApiError('http', 400, 'invalid', { id: 'too long', guaranteed: 'does not fit' })
    expect(formErrors(err, APP_FIELDS)).toEqual({ fields: { guaranteed: 'does not fit' }, general: 'id: too long' })
    expect(formErrors(new ApiError('http', 503, 'store down'), APP_FIELDS)).toEqual({ fields: {}, general: 'store down' })
    expect(formErrors(new ApiError('timeout', 0, 'no answer within 8 s'), APP_FIELDS).general).toBe('no answer within 8 s')
    expect(formErrors(new Error('boom'), APP_FIELDS).general).toBe('boom')
  })
  it('maps indexed field names to their field', () => {
    expect(baseField('emergency_ratios[2]')).toBe('emergency_ratios')
    expect(baseField('emergency_ratios.2')).toBe('emergency_ratios')
    const err = new ApiError('http', 400, 'x', { 'emergency_ratios[3]': 'must be in [0,1]' })
    expect(formErrors(err, ['capacity', 'emergency_ratios']).fields).toEqual({ emergency_ratios: 'must be in [0,1]' })
  })
})

describe('the body of a PUT', () => {
  it('sends only what changed', () => {
    const form = formOf({ ...EFFECTIVE, burst: 300 })
    expect(overrideBody(form, KINDS, EFFECTIVE, null)).toEqual({ body: { burst: 300 }, errors: {} })
  })
  it('keeps the fields the override already sets (a PUT replaces the override)', () => {
    const form = formOf({ ...EFFECTIVE, guaranteed: 50 })
    expect(overrideBody(form, KINDS, EFFECTIVE, { priority: 1 }).body).toEqual({ guaranteed: 50, priority: 1 })
  })
  it('refuses values that do not parse, on their field', () => {
    const form = formOf({ ...EFFECTIVE, burst: 'lots', priority: '1.5', warmup: 'soon' })
    const { body, errors } = overrideBody(form, KINDS, EFFECTIVE, null)
    expect(body).toEqual({})
    expect(Object.keys(errors).sort()).toEqual(['burst', 'priority', 'warmup'])
  })
  it('parses ratios and durations', () => {
    expect(parseValue('ratios', '1, 0.5,0.1 0')).toEqual([1, 0.5, 0.1, 0])
    expect(parseValue('ratios', '1, x')).toEqual({ error: 'numbers separated by commas' })
    expect(parseValue('duration', '1h30m')).toBe('1h30m')
    expect(parseValue('number', '')).toEqual({ error: 'required' })
    const k: Record<string, Kind> = { emergency_ratios: 'ratios' }
    expect(overrideBody({ emergency_ratios: '1, 0.5, 0.1, 0' }, k, { emergency_ratios: [1, 0.5, 0.1, 0] }, null).body).toEqual({})
    expect(overrideBody({ emergency_ratios: '1, 1, 0.1, 0' }, k, { emergency_ratios: [1, 0.5, 0.1, 0] }, null).body)
      .toEqual({ emergency_ratios: [1, 1, 0.1, 0] })
  })
})
