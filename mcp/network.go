package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
)

// networkOut is a sandbox's network policy and what it refused.
type networkOut struct {
	Sandbox      string       `json:"sandbox"`
	Mode         string       `json:"mode" jsonschema:"none: loopback only; limited: only the allowed hosts, through tent's proxy; host: the host's network"`
	AllowedHosts []string     `json:"allowed_hosts" jsonschema:"in limited mode, the hosts that may be reached (*.example.com: its subdomains; :PORT limits the port)"`
	DeniedHosts  []string     `json:"denied_hosts" jsonschema:"hosts refused even when an allowed pattern matches"`
	Denied       []denialView `json:"recent_denials" jsonschema:"destinations refused during this server's commands in the sandbox, oldest first (the last 64)"`
	Secrets      []secretView `json:"secrets,omitempty" jsonschema:"credentials the sandbox uses without holding them: its variable holds a placeholder, which tent's proxy replaces with the real value in HTTPS requests to the hosts listed, and nowhere else"`
	Advice       string       `json:"advice"`
}

// secretView is a secret as network_status shows it: never its value.
type secretView struct {
	Variable string   `json:"variable"`
	Hosts    []string `json:"hosts"`
}

func (s *Server) addNetworkTools() {
	addTool(s, &sdk.Tool{Name: "network_status", Title: "Network policy and refusals",
		Description: "Show a sandbox's network policy (none, limited to allowed hosts, or host) and the connections it recently refused, with the reason for each: call it when a download or API call from the sandbox fails. " +
			"The policy is the operator's: no tool changes it.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxRef) (*sdk.CallToolResult, networkOut, error) {
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, networkOut{}, err
			}
			info, err := handle.Open(ctx, s.b, bx.id).Info(ctx)
			if err != nil {
				return nil, networkOut{}, err
			}
			p := info.Spec.Network
			out := networkOut{Sandbox: bx.id, Mode: string(p.Mode), AllowedHosts: p.AllowedHosts, DeniedHosts: p.DeniedHosts}
			if out.Mode == "" {
				out.Mode = "none"
			}
			if out.AllowedHosts == nil {
				out.AllowedHosts = []string{}
			}
			if out.DeniedHosts == nil {
				out.DeniedHosts = []string{}
			}
			for _, sec := range p.Secrets {
				out.Secrets = append(out.Secrets, secretView{Variable: sec.Name, Hosts: sec.Hosts})
			}
			s.mu.Lock()
			out.Denied = denialViews(bx.denials)
			s.mu.Unlock()
			switch out.Mode {
			case "none":
				out.Advice = "this sandbox has no network (loopback only): work offline, or ask the user to start tent mcp with --allow-host for what you need"
			case "limited":
				out.Advice = "only the allowed hosts can be reached, through the proxy named by HTTP_PROXY/HTTPS_PROXY inside; for another host, ask the user to add --allow-host to tent mcp"
			default:
				out.Advice = "the sandbox uses the host's network"
			}
			return nil, out, nil
		})
}
