// Package telemetry sets up OpenTelemetry traces for toolmux: a tracer
// provider exporting over OTLP (HTTP or gRPC), configured by the
// `telemetry:` section and the standard OTEL_* environment variables, and
// the attribute names of the GenAI and MCP semantic conventions the
// instrumented packages use. Nothing here is global: [New] returns a
// [Telemetry] whose tracer and propagator are handed to the parts that
// trace (toolmux.Options.Telemetry), and whose Close flushes the spans.
//
// Off (the default), [Telemetry.Tracer] is nil and every instrumented
// package skips its spans entirely: a user who does not trace pays a nil
// check per call.
package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmux/toolmux/config"
)

// ScopeName is the instrumentation scope of toolmux's spans.
const ScopeName = "github.com/toolmux/toolmux"

// Telemetry is the tracing of one process: a tracer, or nil when tracing
// is off.
type Telemetry struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// Off is tracing turned off: what a nil *Telemetry also means.
func Off() *Telemetry { return nil }

// Tracer returns the tracer spans are made with; nil when tracing is off
// (t nil included), which the instrumented packages check before doing
// anything.
func (t *Telemetry) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// Propagator returns the propagator of trace context (W3C traceparent,
// tracestate and baggage); nil when tracing is off.
func (t *Telemetry) Propagator() propagation.TextMapPropagator {
	if t == nil {
		return nil
	}
	return t.prop
}

// Enabled reports whether spans are exported.
func (t *Telemetry) Enabled() bool { return t != nil && t.tp != nil }

// Close flushes the spans not exported yet and stops the exporter; ctx
// bounds how long it waits for the collector.
func (t *Telemetry) Close(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// ConfigError is a telemetry setting that cannot be used (an unknown
// protocol in OTEL_EXPORTER_OTLP_PROTOCOL, say).
type ConfigError struct {
	// Setting names the variable or key.
	Setting string
	Message string
}

func (e *ConfigError) Error() string { return e.Setting + ": " + e.Message }

// Settings are what [New] decided from the section and the environment.
type Settings struct {
	// On: spans are exported.
	On bool
	// Protocol is config.TelemetryHTTP or config.TelemetryGRPC.
	Protocol string
	// Endpoint is the section's endpoint, used when no OTEL_* variable
	// names one; "" leaves the exporter to its environment and defaults.
	Endpoint string
}

// Decide reads the section and the environment (getenv, os.Getenv in the
// CLI) the way other OpenTelemetry-instrumented tools do:
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn traces off
// whatever else says; the section's enabled, an
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
// OTEL_TRACES_EXPORTER=otlp turn them on. OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
// then OTEL_EXPORTER_OTLP_PROTOCOL, then the section choose the protocol
// (http/protobuf by default).
func Decide(cfg config.Telemetry, getenv func(string) string) (Settings, error) {
	s := Settings{Protocol: config.TelemetryHTTP, Endpoint: cfg.Endpoint}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return s, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case "none":
		return s, nil
	case "", "otlp":
	default:
		return s, &ConfigError{Setting: "OTEL_TRACES_EXPORTER", Message: fmt.Sprintf("%q is not supported (otlp or none)", exporter)}
	}
	envEndpoint := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	s.On = cfg.Enabled || envEndpoint || exporter == "otlp"
	if envEndpoint {
		s.Endpoint = "" // the exporter reads it, with its per-signal rules
	}
	if cfg.Protocol != "" {
		s.Protocol = cfg.Protocol
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			switch v {
			case config.TelemetryHTTP, config.TelemetryGRPC:
				s.Protocol = v
			default:
				return s, &ConfigError{Setting: k, Message: fmt.Sprintf("%q is not supported (http/protobuf or grpc)", v)}
			}
			break
		}
	}
	return s, nil
}

// New returns the tracing cfg and the environment ask for: off (nil, and
// free) unless [Decide] turns it on, then a tracer provider with a batch
// exporter to the OTLP endpoint. The exporter itself reads the other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates,
// compression), and the provider OTEL_TRACES_SAMPLER and OTEL_BSP_*; the
// resource takes OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
func New(ctx context.Context, cfg config.Telemetry, getenv func(string) string) (*Telemetry, error) {
	s, err := Decide(cfg, getenv)
	if err != nil || !s.On {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	// As for the endpoint, the environment's headers win over the file's.
	envHeaders := getenv("OTEL_EXPORTER_OTLP_HEADERS") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS") != ""
	switch s.Protocol {
	case config.TelemetryGRPC:
		var opts []otlptracegrpc.Option
		if s.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(s.Endpoint))
		}
		if len(cfg.Headers) > 0 && !envHeaders {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if s.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(s.Endpoint, "/")+"/v1/traces"))
		}
		if len(cfg.Headers) > 0 && !envHeaders {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "toolmux"
	}
	// The environment's service name and attributes win over the file's,
	// as OTEL_SERVICE_NAME does elsewhere.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", name)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		// A partial resource (an attribute of OTEL_RESOURCE_ATTRIBUTES
		// that could not be read) is still the best there is.
		if res == nil {
			res = resource.Default()
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Telemetry{tp: tp, tracer: tp.Tracer(ScopeName),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}, nil
}

// ForTest returns tracing into tp (an in-memory recorder's provider, say),
// for tests of the instrumented packages; Close shuts tp down.
func ForTest(tp *sdktrace.TracerProvider) *Telemetry {
	return &Telemetry{tp: tp, tracer: tp.Tracer(ScopeName),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
}

// HTTPClient returns a client whose requests carry the trace context of
// their context's span in their headers (traceparent, tracestate,
// baggage): the language models' (llm.WithHTTPClient). Nil when tracing is
// off: the models then use their default client.
func (t *Telemetry) HTTPClient() *http.Client {
	if t == nil || t.tracer == nil {
		return nil
	}
	return &http.Client{Transport: &injecting{base: http.DefaultTransport, prop: t.prop}}
}

// injecting adds the trace context to every request that has one.
type injecting struct {
	base http.RoundTripper
	prop propagation.TextMapPropagator
}

func (t *injecting) RoundTrip(req *http.Request) (*http.Response, error) {
	if !trace.SpanContextFromContext(req.Context()).IsValid() {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	t.prop.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	return t.base.RoundTrip(req)
}
