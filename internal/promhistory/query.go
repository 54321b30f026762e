package promhistory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// series is one series of a range query's matrix.
type series struct {
	Metric map[string]string `json:"metric"`
	Values []sample          `json:"values"`
}

// sample is one [time, "value"] pair of a matrix.
type sample struct {
	T float64
	V float64
}

func (s *sample) UnmarshalJSON(b []byte) error {
	var pair [2]json.RawMessage
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	if err := json.Unmarshal(pair[0], &s.T); err != nil {
		return err
	}
	var v string
	if err := json.Unmarshal(pair[1], &v); err != nil {
		return err
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return err
	}
	s.V = f
	return nil
}

// maxAnswer bounds a query's answer: a week at 30-minute steps is a few hundred points per
// series, far below it.
const maxAnswer = 8 << 20

// queryRange runs GET /api/v1/query_range and returns its matrix.
func (s *Source) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]series, error) {
	u := *s.base
	u.Path = singleSlash(u.Path) + "api/v1/query_range"
	u.RawQuery = url.Values{
		"query": {expr},
		"start": {strconv.FormatInt(start.Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {strconv.FormatInt(int64(step/time.Second), 10)},
	}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// the url.Error names the URL: with its credentials redacted
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("prometheus at %s: %v", s.Address(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("prometheus at %s: reading the answer: %v", s.Address(), err)
	}
	if len(body) > maxAnswer {
		return nil, fmt.Errorf("prometheus at %s: the answer exceeds %d bytes", s.Address(), maxAnswer)
	}
	var answer struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string   `json:"resultType"`
			Result     []series `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("prometheus at %s: HTTP %d, not a Prometheus API answer", s.Address(), resp.StatusCode)
	}
	if answer.Status != "success" {
		return nil, fmt.Errorf("prometheus at %s: HTTP %d: %s", s.Address(), resp.StatusCode, answer.Error)
	}
	if answer.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("prometheus at %s: a range query answered %q, not a matrix", s.Address(), answer.Data.ResultType)
	}
	return answer.Data.Result, nil
}

// singleSlash is p with exactly one trailing slash (a server under a path prefix).
func singleSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p + "/"
}
