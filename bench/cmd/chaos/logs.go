package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"time"
)

// The plugin's log messages for a fail_open episode and for a slow stretch (docs/operations.md,
// "What the log says").
const (
	msgEnter     = "rate_limit: Store unavailable, entering fail_open"
	msgRecovered = "rate_limit: Store recovered, leaving fail_open"
	msgSlow      = "rate_limit: Store slow, leasing in larger batches"
	msgNormal    = "rate_limit: Store latency back to normal"
)

// logEvent is one line of interest in a gateway's log.
type logEvent struct {
	at  time.Time
	msg string
}

// processLog is what one gateway process logged.
type processLog struct {
	path       string
	events     []logEvent // enter / recovered / slow / normal, in order
	plain      int        // lines that are not JSON (printed around Caddy's logger)
	firstPlain string
	errors     int    // ERROR lines
	firstErr   string // the first ERROR's message
}

func readLog(path string) (processLog, error) {
	pl := processLog{path: path}
	f, err := os.Open(path)
	if err != nil {
		return pl, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e struct {
			Level string  `json:"level"`
			TS    float64 `json:"ts"`
			Msg   string  `json:"msg"`
		}
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			pl.plain++
			if pl.firstPlain == "" {
				pl.firstPlain = line
			}
			continue
		}
		if e.Level == "error" {
			pl.errors++
			if pl.firstErr == "" {
				pl.firstErr = e.Msg
			}
		}
		switch e.Msg {
		case msgEnter, msgRecovered, msgSlow, msgNormal:
			sec := int64(e.TS)
			pl.events = append(pl.events, logEvent{at: time.Unix(sec, int64((e.TS-float64(sec))*1e9)), msg: e.Msg})
		}
	}
	return pl, sc.Err()
}

// episodes checks that fail_open episodes alternate: each WARN is followed by one INFO before
// the next WARN. It returns the count of WARNs, of WARNs logged while an episode was already
// open (an episode logged twice), and whether the last episode is still open.
func (pl processLog) episodes() (opened, doubled int, open bool) {
	for _, e := range pl.events {
		switch e.msg {
		case msgEnter:
			opened++
			if open {
				doubled++
			}
			open = true
		case msgRecovered:
			open = false
		}
	}
	return opened, doubled, open
}

// enteredBetween reports whether the process logged a fail_open WARN in [from, to], or was
// already in an episode at from (a fault that began inside an open episode is part of it).
func (pl processLog) enteredBetween(from, to time.Time) bool {
	open := false
	for _, e := range pl.events {
		if e.at.After(to) {
			break
		}
		switch e.msg {
		case msgEnter:
			if !e.at.Before(from) {
				return true
			}
			open = true
		case msgRecovered:
			open = false
		}
	}
	return open
}
