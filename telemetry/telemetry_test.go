package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/telemetry"
)

// Close stops the exporter's and the batch processor's goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestDecide pins when traces are on, and over which protocol: the
// section, the OTEL_* variables that turn them on, and the two that turn
// them off whatever else says.
func TestDecide(t *testing.T) {
	on := config.Telemetry{Enabled: true}
	for _, tc := range []struct {
		name     string
		cfg      config.Telemetry
		env      func(string) string
		on       bool
		protocol string
	}{
		{"default off", config.Telemetry{}, env(), false, config.TelemetryHTTP},
		{"section", on, env(), true, config.TelemetryHTTP},
		{"endpoint", config.Telemetry{}, env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), true, config.TelemetryHTTP},
		{"traces endpoint", config.Telemetry{}, env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces"), true, config.TelemetryHTTP},
		{"exporter otlp", config.Telemetry{}, env("OTEL_TRACES_EXPORTER", "otlp"), true, config.TelemetryHTTP},
		{"sdk disabled", on, env("OTEL_SDK_DISABLED", "true", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), false, config.TelemetryHTTP},
		{"exporter none", on, env("OTEL_TRACES_EXPORTER", "none"), false, config.TelemetryHTTP},
		{"grpc by env", on, env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), true, config.TelemetryGRPC},
		{"grpc by section", config.Telemetry{Enabled: true, Protocol: config.TelemetryGRPC}, env(), true, config.TelemetryGRPC},
		{"traces protocol first", on, env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"), true, config.TelemetryHTTP},
	} {
		s, err := telemetry.Decide(tc.cfg, tc.env)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.On != tc.on || s.Protocol != tc.protocol {
			t.Errorf("%s: got %+v, want on %v over %s", tc.name, s, tc.on, tc.protocol)
		}
	}
	for _, e := range []func(string) string{env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), env("OTEL_TRACES_EXPORTER", "zipkin")} {
		_, err := telemetry.Decide(on, e)
		if _, ok := errors.AsType[*telemetry.ConfigError](err); !ok {
			t.Errorf("want a *ConfigError, got %v", err)
		}
	}
}

// TestOffIsNil: off, New returns nil, whose tracer and propagator are nil
// (what the instrumented packages check) and whose Close does nothing.
func TestOffIsNil(t *testing.T) {
	tel, err := telemetry.New(context.Background(), config.Telemetry{}, env())
	if err != nil || tel != nil {
		t.Fatalf("got %v, %v", tel, err)
	}
	if tel.Tracer() != nil || tel.Propagator() != nil || tel.Enabled() || tel.Close(context.Background()) != nil {
		t.Error("a nil Telemetry is not off")
	}
}

// TestOnCloses: on, New builds a provider (no collector needed until the
// first export) and Close shuts it down.
func TestOnCloses(t *testing.T) {
	for _, p := range []string{config.TelemetryHTTP, config.TelemetryGRPC} {
		tel, err := telemetry.New(context.Background(), config.Telemetry{Enabled: true, Protocol: p, Endpoint: "http://127.0.0.1:1"}, env())
		if err != nil || !tel.Enabled() || tel.Tracer() == nil || tel.Propagator() == nil {
			t.Fatalf("%s: %v %v", p, tel, err)
		}
		if err := tel.Close(context.Background()); err != nil {
			t.Errorf("%s: close: %v", p, err)
		}
	}
}

// TestHTTPClientInjects: the models' client sends the traceparent of the
// request context's span, and nothing without one.
func TestHTTPClientInjects(t *testing.T) {
	tel := telemetry.ForTest(sdktrace.NewTracerProvider())
	defer tel.Close(context.Background())
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("Traceparent") }))
	defer srv.Close()
	ctx, sp := tel.Tracer().Start(context.Background(), "chat")
	defer sp.End()
	for _, c := range []context.Context{ctx, context.Background()} {
		req, _ := http.NewRequestWithContext(c, http.MethodGet, srv.URL, nil)
		resp, err := tel.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := fmt.Sprintf("00-%s-%s-01", sp.SpanContext().TraceID(), sp.SpanContext().SpanID())
	if a, b := <-got, <-got; a != want || b != "" {
		t.Errorf("traceparents %q, %q; want %q, then none", a, b, want)
	}
	if telemetry.Off().HTTPClient() != nil {
		t.Error("off, the models keep their own client")
	}
}

// TestSectionExports: the section alone (no OTEL_* variables) exports to
// its endpoint (/v1/traces added), with its headers and service name.
func TestSectionExports(t *testing.T) {
	got := make(chan *collectortrace.ExportTraceServiceRequest, 4)
	keys := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var in collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		keys <- r.Header.Get("X-Api-Key")
		got <- &in
	}))
	defer srv.Close()
	tel, err := telemetry.New(context.Background(), config.Telemetry{Enabled: true, Endpoint: srv.URL,
		ServiceName: "gw-1", Headers: map[string]string{"X-Api-Key": "k1"}}, env())
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tel.Tracer().Start(context.Background(), "execute_tool echo")
	sp.End()
	if err := tel.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	in, key := <-got, <-keys
	var service string
	for _, kv := range in.ResourceSpans[0].GetResource().GetAttributes() {
		if kv.Key == "service.name" {
			service = kv.GetValue().GetStringValue()
		}
	}
	if service != "gw-1" || key != "k1" || in.ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "execute_tool echo" {
		t.Errorf("service %q, key %q, spans %v", service, key, in.ResourceSpans)
	}
}
