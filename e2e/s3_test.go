package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/tierbucket/caddy-tierbucket/internal/testenv"
)

// s3Server is a small in-memory S3 (path-style): create bucket, put, get, head, delete (one
// object, or a list: DeleteObjects) and list objects. It is the backend the gateway under test
// protects; real S3 clients talk to it through the gateway.
type s3Server struct {
	mu      sync.Mutex
	buckets map[string]map[string][]byte
}

func startS3Server(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: &s3Server{buckets: map[string]map[string][]byte{}}}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func (s *s3Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	objs := s.buckets[bucket]
	switch {
	case key == "" && r.Method == http.MethodPut:
		if objs == nil {
			s.buckets[bucket] = map[string][]byte{}
		}
	case objs == nil:
		s3Fail(w, http.StatusNotFound, "NoSuchBucket")
	case key == "" && r.Method == http.MethodGet:
		type content struct {
			Key  string `xml:"Key"`
			Size int    `xml:"Size"`
		}
		out := struct {
			XMLName  xml.Name  `xml:"ListBucketResult"`
			Name     string    `xml:"Name"`
			KeyCount int       `xml:"KeyCount"`
			Contents []content `xml:"Contents"`
		}{Name: bucket}
		var keys []string
		for k := range objs {
			if strings.HasPrefix(k, r.URL.Query().Get("prefix")) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			out.Contents = append(out.Contents, content{Key: k, Size: len(objs[k])})
		}
		out.KeyCount = len(keys)
		w.Header().Set("Content-Type", "application/xml")
		xml.NewEncoder(w).Encode(out)
	case r.Method == http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		objs[key] = b
		w.Header().Set("ETag", fmt.Sprintf(`"%x"`, len(b)))
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		b, ok := objs[key]
		if !ok {
			s3Fail(w, http.StatusNotFound, "NoSuchKey")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.Header().Set("ETag", fmt.Sprintf(`"%x"`, len(b)))
		if r.Method == http.MethodGet {
			w.Write(b)
		}
	case r.Method == http.MethodDelete:
		delete(objs, key)
		w.WriteHeader(http.StatusNoContent)
	case key == "" && r.Method == http.MethodPost && r.URL.Query().Has("delete"):
		var list struct {
			Objects []struct {
				Key string `xml:"Key"`
			} `xml:"Object"`
		}
		if err := xml.NewDecoder(r.Body).Decode(&list); err != nil || len(list.Objects) > 1000 {
			s3Fail(w, http.StatusBadRequest, "MalformedXML")
			return
		}
		type deleted struct {
			Key string `xml:"Key"`
		}
		out := struct {
			XMLName xml.Name  `xml:"DeleteResult"`
			Deleted []deleted `xml:"Deleted"`
		}{}
		for _, o := range list.Objects {
			delete(objs, o.Key)
			out.Deleted = append(out.Deleted, deleted{Key: o.Key})
		}
		w.Header().Set("Content-Type", "application/xml")
		xml.NewEncoder(w).Encode(out)
	default:
		s3Fail(w, http.StatusNotImplemented, "NotImplemented")
	}
}

func s3Fail(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<Error><Code>%s</Code><Message>%s</Message></Error>", code, code)
}

// s3Gateway starts a Caddy in front of the in-memory S3 with `format s3`. The app is the
// bucket (the first path segment), quota 200 cost tokens/s, burst 200: a PUT of a small object
// costs 6, a GET 1.
func s3Gateway(t *testing.T) *gateway {
	backend := startS3Server(t)
	site := fmt.Sprintf(`	rate_limit {
		key {http.request.uri.path.0}
		unknown_app reject
		format s3
		app photos {
			guaranteed 200
			burst 200
		}
	}
	reverse_proxy %s`, backend)
	return startGateway(t, "s3", site)
}

// newS3Client is an aws-sdk-go-v2 client on the gateway (path-style, static credentials).
func newS3Client(base string, maxAttempts int) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(base),
		Region:       "us-east-1",
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = maxAttempts
			o.MaxBackoff = 2 * time.Second
			o.RateLimiter = ratelimit.None // the server's throttling is what is under test
		}),
	})
}

// aws-sdk-go-v2: without retries a throttled request surfaces as SlowDown/503; with its
// standard retryer a burst well above the quota completes, the SDK backing off on its own.
func TestS3SDKGo(t *testing.T) {
	requireCaddy(t)
	g := s3Gateway(t)
	ctx := context.Background()
	strict := newS3Client(g.base, 1)
	if _, err := strict.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("photos")}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}

	// Without retries: the burst runs out and the SDK reports S3's throttle.
	var apiErr smithy.APIError
	var sawThrottle bool
	for i := range 60 {
		_, err := strict.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String("photos"),
			Key:    aws.String(fmt.Sprintf("k%d", i)), Body: bytes.NewReader([]byte("x")),
		})
		if err == nil {
			continue
		}
		var re interface{ HTTPStatusCode() int }
		if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "SlowDown" || !errors.As(err, &re) || re.HTTPStatusCode() != 503 {
			t.Fatalf("a throttled PutObject: %v, want SlowDown with status 503", err)
		}
		sawThrottle = true
		break
	}
	if !sawThrottle {
		t.Fatal("60 PutObject calls at once (cost 360) were never throttled (burst 200)")
	}

	// With the standard retryer: 100 PUTs and 100 GETs (cost 700, 2.5 s of quota beyond the
	// burst) from 4 goroutines all succeed.
	patient := newS3Client(g.base, 10)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := time.Now()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				key := fmt.Sprintf("w%d-%d", w, i)
				_, err := patient.PutObject(ctx, &s3.PutObjectInput{
					Bucket: aws.String("photos"),
					Key:    aws.String(key), Body: bytes.NewReader([]byte("x")),
				})
				if err == nil {
					_, err = patient.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("photos"), Key: aws.String(key)})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("with retries an error reached the application: %v", err)
	}
	t.Logf("aws-sdk-go-v2: 200 requests (cost 700) at a quota of 200/s completed in %v", time.Since(start).Round(10*time.Millisecond))
}

// boto3Script drives boto3 against the gateway: retries off, then standard mode.
const boto3Script = `
import sys, boto3, botocore
from botocore.config import Config
from concurrent.futures import ThreadPoolExecutor

endpoint = sys.argv[1]
def client(cfg):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
        config=Config(s3={"addressing_style": "path"}, retries=cfg))

strict = client({"mode": "standard", "total_max_attempts": 1})
strict.create_bucket(Bucket="photos")
seen = None
for i in range(60):
    try:
        strict.put_object(Bucket="photos", Key="k%d" % i, Body=b"x")
    except botocore.exceptions.ClientError as e:
        seen = (e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"])
        break
print("strict", seen)

patient = client({"mode": "standard", "total_max_attempts": 10})
def work(w):
    for i in range(25):
        patient.put_object(Bucket="photos", Key="w%d-%d" % (w, i), Body=b"x")
        patient.get_object(Bucket="photos", Key="w%d-%d" % (w, i))["Body"].read()
    return True
with ThreadPoolExecutor(4) as ex:
    print("patient", all(ex.map(work, range(4))))
`

// boto3: with retries off a throttled request is a ClientError SlowDown/503; in standard retry
// mode a burst well above the quota completes with no error reaching the application.
func TestS3SDKBoto3(t *testing.T) {
	requireCaddy(t)
	if err := exec.Command("python3", "-c", "import boto3").Run(); err != nil {
		testenv.Missing(t, "boto3 not installed (apt-get install python3-boto3)")
	}
	g := s3Gateway(t)
	script := filepath.Join(t.TempDir(), "boto3_test.py")
	if err := os.WriteFile(script, []byte(boto3Script), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", script, g.base)
	cmd.Env = append(os.Environ(), "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("boto3: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "strict ('SlowDown', 503)") || !strings.Contains(string(out), "patient True") {
		t.Fatalf("boto3 output:\n%s\nwant a SlowDown/503 without retries and success with standard retries", out)
	}
	t.Logf("boto3: %s", strings.TrimSpace(string(out)))
}

// A bulk delete through a real SDK is charged per object: aws-sdk-go-v2's DeleteObjects of 10
// keys costs 10 × DELETE (2) + its list's one quantum, not a POST's 5.
func TestS3DeleteObjectsCost(t *testing.T) {
	requireCaddy(t)
	g := s3Gateway(t)
	ctx := context.Background()
	c := newS3Client(g.base, 1)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("photos")}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	var ids []types.ObjectIdentifier
	for i := range 10 {
		key := fmt.Sprintf("album/%02d.jpg", i)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String("photos"), Key: aws.String(key),
			Body: strings.NewReader("jpeg"),
		}); err != nil {
			t.Fatalf("PutObject: %v", err)
		}
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(key)})
	}
	want := 5.0 + 10*6 // the bucket, then ten PUTs of 5 + 1 quantum
	g.waitMetric(5*time.Second, func(v float64) bool { return v == want }, "caddy_rate_limit_cost_total", `app="photos"`)
	out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("photos"), Delete: &types.Delete{Objects: ids}})
	if err != nil || len(out.Deleted) != 10 {
		t.Fatalf("DeleteObjects: %v, %d deleted", err, len(out.Deleted))
	}
	want += 10*2 + 1
	g.waitMetric(5*time.Second, func(v float64) bool { return v == want }, "caddy_rate_limit_cost_total", `app="photos"`)
}

// A throttled upload whose client waits for "100 Continue" before sending its body (boto3 and
// aws-cli do for every PutObject and UploadPart) gets its rejection at once. Were the request's
// expect-continue reader hidden from Go's server behind Caddy's own body readers, the server
// would read the unsent body to reuse the connection: over HTTPS boto3 and aws-cli would stall
// for their 60 s read timeout on every throttled upload, and over HTTP until the client gives up
// waiting.
func TestThrottledUploadDoesNotWaitForBody(t *testing.T) {
	requireCaddy(t)
	backend := startS3Server(t)
	g := startGateway(t, "continue", fmt.Sprintf(`	rate_limit {
		key {http.request.uri.path.0}
		format s3
		app photos {
			guaranteed 0.01
			burst 1
		}
	}
	reverse_proxy %s`, backend))
	if r := g.send("HEAD", "/photos/x", "", ""); r.status != http.StatusNotFound { // the one token
		t.Fatalf("first request: %d %q, want the backend's 404", r.status, r.body)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "PUT /photos/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5242880\r\n"+
		"Expect: 100-continue\r\n\r\n") // and no body: the client waits for "100 Continue"
	conn.SetReadDeadline(time.Now().Add(15 * time.Second)) // a hang guard, not a measurement
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a throttled upload whose body waits for 100 Continue: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("throttled upload: %s, Connection %q; want 503 SlowDown, closing", resp.Status, resp.Header.Get("Connection"))
	}
}

// awsChunkedBody is an upload as boto3 1.43 frames it over HTTPS (flexible checksums on, the
// default): Transfer-Encoding chunked, Content-Encoding aws-chunked, the payload in 1 MiB
// chunks, then a CRC32 trailer. The checksum is not checked by the in-memory S3; the sizes
// are what matter here: 64 KiB of payload is 65 581 bytes on the wire, 1 MiB 1 048 622.
func awsChunkedBody(payload int) string {
	var b strings.Builder
	for left := payload; left > 0; left -= 1 << 20 {
		n := min(left, 1<<20)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, strings.Repeat("x", n))
	}
	b.WriteString("0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n")
	return b.String()
}

// TestS3AwsChunkedCost: an aws-chunked upload through the real gateway is charged its
// payload (x-amz-decoded-content-length), not its framing: 64 KiB costs 5 + 1, 1 MiB 5 + 16
// (on the wire's bytes they cost 7 and 22). Sent without a length, as boto3 sends it.
func TestS3AwsChunkedCost(t *testing.T) {
	g := s3Gateway(t)
	if r := g.send("PUT", "/photos", "", ""); r.status != 200 { // create the bucket: cost 5
		t.Fatalf("create bucket: %d %q", r.status, r.body)
	}
	want := 5.0
	for _, tt := range []struct{ payload, cost int }{{64 << 10, 6}, {1 << 20, 21}} {
		body := awsChunkedBody(tt.payload)
		req, err := http.NewRequest("PUT", g.base+"/photos/obj", io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Encoding", "aws-chunked")
		req.Header.Set("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
		req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
		req.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(tt.payload))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || req.ContentLength != 0 {
			t.Fatalf("PUT of %d bytes aws-chunked: %s (sent with Content-Length %d)", tt.payload, resp.Status, req.ContentLength)
		}
		want += float64(tt.cost)
		g.waitMetric(5*time.Second, func(v float64) bool { return v == want },
			"caddy_rate_limit_cost_total", `app="photos"`)
	}
}
