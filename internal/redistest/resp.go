package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Do sends one command to the server and returns its reply: a string (simple and bulk
// strings), an int64, nil (a null), []any (arrays), or an error for an error reply. It is the
// harness's own minimal client, so that tests can drive servers (CLUSTER, DEBUG, CONFIG) without
// going through the client under test.
func (s *Server) Do(args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	v, err := readReply(bufio.NewReader(c))
	if e, ok := v.(replyError); ok {
		return nil, e
	}
	return v, err
}

// replyError is an error reply; inside an array it is an element, at the top the error.
type replyError string

func (e replyError) Error() string { return string(e) }

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return replyError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redistest: unexpected reply %q", line)
}

// Running reports whether the server process is running (started and not stopped).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// SetUser creates or replaces the ACL user with password pw and rules (the rest of an
// `ACL SETUSER` command after the user name, such as redislua.ACLRules), or fails the test.
func (s *Server) SetUser(t testing.TB, user, pw, rules string) {
	t.Helper()
	args := append([]string{"ACL", "SETUSER", user, "reset", ">" + pw}, strings.Fields(rules)...)
	if _, err := s.Do(args...); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", user, err)
	}
}
