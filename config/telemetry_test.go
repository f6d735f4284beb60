package config_test

import (
	"reflect"
	"testing"

	"github.com/toolmux/toolmux/config"
)

func TestTelemetrySection(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    config.Telemetry
	}{
		{"workspace: .\n", config.Telemetry{}},
		{"telemetry: {enabled: true}\n", config.Telemetry{Enabled: true}},
		{"telemetry:\n  enabled: true\n  endpoint: http://collector:4318\n  protocol: grpc\n  service_name: gw-1\n  headers: {x-api-key: k}\n",
			config.Telemetry{Enabled: true, Endpoint: "http://collector:4318", Protocol: config.TelemetryGRPC, ServiceName: "gw-1",
				Headers: map[string]string{"x-api-key": "k"}}},
	} {
		cfg, err := config.ParseWith("toolmux.yaml", []byte(tc.content), config.Options{Dir: "/work"})
		if err != nil {
			t.Fatalf("%q: %v", tc.content, err)
		}
		if !reflect.DeepEqual(cfg.Telemetry, tc.want) {
			t.Errorf("%q: got %+v, want %+v", tc.content, cfg.Telemetry, tc.want)
		}
	}
}

func TestTelemetryErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `telemetry:
  enabled: yes please
  endpoint: collector:4318
  protocol: http/json
  servce_name: x
`, []wantErr{
		{2, 12, "telemetry.enabled", `expected true or false, got "yes please"`},
		{3, 13, "telemetry.endpoint", `"collector:4318" is not an http or https URL`},
		{4, 13, "telemetry.protocol", `unknown protocol "http/json" (expected http/protobuf or grpc)`},
		{5, 3, "telemetry.servce_name", "unknown key (expected one of: enabled, endpoint, protocol, service_name, headers); did you mean service_name?"},
	})
}
