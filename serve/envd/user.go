package envd

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
)

// E2B's requests name the user they run as: the Basic user of the
// Authorization header (Connect procedures, and /files of recent SDKs),
// or the username query parameter of /files. "root" runs commands as
// root inside the sandbox (sandbox.ExecRequest.AsRoot: uid 0 of a user
// namespace nested in the sandbox's, mapped to the sandbox's user, with
// no capability and every restriction), with HOME, USER and LOGNAME those
// of root and /root as the working directory and the base of relative
// paths; files are read and written as the sandbox's user either way
// (the same owner on disk), and entries it owns are reported as root's.
// Any other name is the sandbox's own user, as before.
const rootUser = "root"

type userKey struct{}

// requestUser is the user r names, "" for the sandbox's own.
func requestUser(r *http.Request) string {
	if u := r.URL.Query().Get("username"); u != "" {
		return u
	}
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Basic ")
	if !ok {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(auth))
	if err != nil {
		return ""
	}
	u, _, _ := strings.Cut(string(b), ":")
	return u
}

// withUser records in ctx whether the request runs as root.
func withUser(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, userKey{}, requestUser(r) == rootUser)
}

// asRoot reports whether the request of ctx runs as root.
func asRoot(ctx context.Context) bool {
	root, _ := ctx.Value(userKey{}).(bool)
	return root
}

// rootHome is root's $HOME and working directory.
const rootHome = "/root"

// rootEnv is the environment of a command run as root, under the
// caller's own variables.
var rootEnv = []string{"HOME=" + rootHome, "USER=" + rootUser, "LOGNAME=" + rootUser}
