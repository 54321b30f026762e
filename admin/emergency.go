package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// The operator emergency: POST /rate_limit/emergency/activate and /deactivate set and clear it
// fleet-wide through the cluster's Store (limiter.Limiter.SetEmergency). This instance applies
// it at once; the others at their next report (one sync interval).

// maxBody is the largest request body the POST routes read.
const maxBody = 64 << 10

// maxReason is the longest reason, in characters.
const maxReason = 256

// setTimeout bounds the Store call (and the report after it) of a POST route.
const setTimeout = 5 * time.Second

// configChangedEvent is the Caddy event emitted on every change made through the API.
const configChangedEvent = "rate_limit_config_changed"

// activateRequest is the body of POST /rate_limit/emergency/activate.
type activateRequest struct {
	Reason   *string         `json:"reason"`
	Duration json.RawMessage `json:"duration"` // a Caddy duration string; absent or null: until deactivated
}

// activate is POST /rate_limit/emergency/activate.
func (a API) activate(w http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
	var req activateRequest
	present, err := readJSON(r, &req)
	if err != nil {
		return nil, err
	}
	if !present {
		return nil, apiError(http.StatusBadRequest, `missing request body: {"reason": "…", "duration": "5m"} (duration optional)`)
	}
	if req.Reason == nil {
		return nil, apiError(http.StatusBadRequest, `field "reason": required (1 to %d characters)`, maxReason)
	}
	if n := utf8.RuneCountInString(*req.Reason); n < 1 || n > maxReason {
		return nil, apiError(http.StatusBadRequest, `field "reason": %d characters; must be 1 to %d`, n, maxReason)
	}
	if strings.ContainsFunc(*req.Reason, func(r rune) bool { return unicode.IsControl(r) || r == utf8.RuneError }) {
		return nil, apiError(http.StatusBadRequest, `field "reason": control characters and invalid UTF-8 are not allowed (it is shown in logs and the console)`)
	}
	d, err := parseDuration(req.Duration)
	if err != nil {
		return nil, err
	}
	e := store.Emergency{Active: true, Reason: *req.Reason}
	if d > 0 {
		e.Until = time.Now().Add(d)
	}
	return a.change(r, c, "activate", e)
}

// deactivate is POST /rate_limit/emergency/deactivate: it clears the operator emergency; L1's
// automatic one follows L1's usage. A body is not needed; one that is sent must be an empty
// JSON object.
func (a API) deactivate(w http.ResponseWriter, r *http.Request, c Cluster) (any, error) {
	var req struct{}
	if _, err := readJSON(r, &req); err != nil {
		return nil, err
	}
	return a.change(r, c, "deactivate", store.Emergency{})
}

// change stores e, then logs the change and emits the event. It answers with the emergency
// state this instance sees after the report that follows the change.
func (a API) change(r *http.Request, c Cluster, action string, e store.Emergency) (any, error) {
	lim := c.Limiter()
	before := emergencyView(lim.State())
	ctx, cancel := context.WithTimeout(r.Context(), setTimeout)
	defer cancel()
	if err := lim.SetEmergency(ctx, e); err != nil {
		return nil, storeFailure(fmt.Sprintf("cluster %q: %s the operator emergency", c.ID(), action), err,
			"check GET "+prefix+"emergency")
	}
	after := emergencyView(lim.State())
	requested := map[string]any{"active": e.Active}
	if e.Active {
		requested["reason"] = e.Reason
		requested["until"] = nil
		if !e.Until.IsZero() {
			requested["until"] = e.Until.UTC().Format(time.RFC3339Nano)
		}
	}
	a.log().Info("rate_limit: operator emergency "+action+"d through the admin API",
		zap.String("cluster", c.ID()),
		zap.String("remote_addr", r.RemoteAddr),
		zap.Any("requested", requested),
		zap.Any("before", before),
		zap.Any("after", after))
	if a.events != nil && a.events.ShouldEmit(configChangedEvent) {
		a.events.Emit(a.ctx, configChangedEvent, map[string]any{
			"cluster":     c.ID(),
			"change":      "emergency_" + action,
			"remote_addr": r.RemoteAddr,
			"requested":   requested,
			"before":      viewMap(before),
			"after":       viewMap(after),
		})
	}
	a.record(r, c, "emergency_"+action, map[string]any{"requested": requested}, viewMap(before), viewMap(after))
	return after, nil
}

// viewMap is an EmergencyView as the JSON object the API shows.
func viewMap(v EmergencyView) map[string]any {
	m := map[string]any{"active": v.Active, "source": v.Source, "reason": v.Reason, "until": nil}
	if v.Until != nil {
		m["until"] = v.Until.Format(time.RFC3339Nano)
	}
	return m
}

// readJSON decodes a POST body into v: 415 unless the body is application/json, 413 above
// maxBody, 400 for invalid JSON (naming the field where there is one), unknown fields or
// trailing data. An empty body is not an error: present is false and v is untouched.
func readJSON(r *http.Request, v any) (present bool, err error) {
	var b []byte
	if r.Body != nil {
		b, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return false, apiError(http.StatusBadRequest, "reading the request body: %v", err)
		}
	}
	if len(b) == 0 {
		return false, nil
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return true, caddy.APIError{
			HTTPStatus: http.StatusUnsupportedMediaType,
			Err:        fmt.Errorf("Content-Type %q: the body must be application/json", ct),
		}
	}
	if len(b) > maxBody {
		return true, caddy.APIError{
			HTTPStatus: http.StatusRequestEntityTooLarge,
			Err:        fmt.Errorf("request body larger than %d bytes", maxBody),
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return true, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return true, apiError(http.StatusBadRequest, "invalid JSON body: data after the object")
	}
	return true, exactKeys(b, v)
}

// exactKeys refuses an object key that names a field of v only when case is ignored:
// encoding/json takes "Guaranteed" for "guaranteed", but the API's names are exact, like the
// unknown fields it refuses.
func exactKeys(b []byte, v any) error {
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) != nil {
		return nil // null: nothing was set
	}
	names := map[string]bool{}
	for i := range t.Elem().NumField() {
		name, _, _ := strings.Cut(t.Elem().Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !names[k] {
			return apiError(http.StatusBadRequest, "unknown field %q (field names are exact, in lower case)", k)
		}
	}
	return nil
}

// jsonError turns a decoding error into a 400 that names the field where there is one.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return apiError(http.StatusBadRequest, "field %q: a JSON %s is not a valid value (want %s)", te.Field, te.Value, jsonKind(te.Type.Kind().String()))
		}
		return apiError(http.StatusBadRequest, "invalid JSON body: want an object, got a JSON %s", te.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return apiError(http.StatusBadRequest, "unknown field %s", f)
	}
	return apiError(http.StatusBadRequest, "invalid JSON body: %v", err)
}

func jsonKind(k string) string {
	switch k {
	case "ptr", "string":
		return "a string"
	case "struct", "map":
		return "an object"
	}
	return k
}

// parseDuration is the "duration" field: absent or null is 0 (until deactivated); otherwise a
// string in Caddy's duration syntax ("90s", "5m", "1h30m", "2d"), > 0.
func parseDuration(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, apiError(http.StatusBadRequest, `field "duration": %s is not a string (a Caddy duration such as "5m")`, raw)
	}
	d, err := caddy.ParseDuration(s)
	if err != nil {
		return 0, apiError(http.StatusBadRequest, `field "duration": %q: %v (a Caddy duration such as "5m")`, s, err)
	}
	if d <= 0 {
		return 0, apiError(http.StatusBadRequest, `field "duration": %q: must be > 0 (omit it: until deactivated)`, s)
	}
	if d > maxDuration {
		return 0, apiError(http.StatusBadRequest, `field "duration": %q: at most %v`, s, maxDuration)
	}
	return d, nil
}

// loggerName names the admin API's log lines, as Caddy names a module's.
const loggerName = "admin.api.rate_limit"

// maxDuration bounds "duration" (a year): far beyond any incident, far below the Store's limit.
const maxDuration = 365 * 24 * time.Hour

func (a API) log() *zap.Logger {
	if a.logger != nil {
		return a.logger
	}
	return caddy.Log().Named(loggerName)
}
