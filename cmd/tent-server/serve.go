package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/cmd/tent/cli"
	"github.com/tent-sandbox/tent/sandbox/policy"
	"github.com/tent-sandbox/tent/sandbox/supervised"
	"github.com/tent-sandbox/tent/serve"
)

// serveOptions are tent serve's flags.
type serveOptions struct {
	listen    string
	apiKey    string
	keyFile   string
	templates string
	keep      bool
	tlsCert   string
	tlsKey    string
	insecure  bool
	domain    string
	private   bool
	maxUpload string
}

// pythonKey is the form of API key E2B's Python SDK accepts.
var pythonKey = regexp.MustCompile(`^e2b_[0-9a-fA-F]+$`)

// defaultListen is tent serve's address: loopback only.
const defaultListen = "127.0.0.1:49982"

func newServeCmd(g *cli.Globals) *cobra.Command {
	o := &serveOptions{}
	c := &cobra.Command{
		Use:   "serve [flags]",
		Short: cli.ServeShort,
		Long: `Serve E2B's API, so that the official E2B SDKs (Python, TypeScript) create
and use tent sandboxes. One address serves both of the SDK's URLs; set

  E2B_API_URL=http://ADDR  E2B_SANDBOX_URL=http://ADDR  E2B_API_KEY=KEY

The API key is read from --api-key-file (a file of yours, mode 0600, or
- for the first line of stdin), else $TENT_API_KEY, else the one kept in
the state directory (serve-api-key, mode 0600, generated the first time).
A key given on the command line (--api-key) is refused: every local user
can read a process's arguments in /proc.
Every control-plane request must carry it; in-sandbox requests carry the
sandbox's own access token instead.

Templates are tent policy files (see tent run --policy) in the --templates
directory, named TEMPLATE.yaml, .yml or .json; "base" (the SDK's default)
is a sandbox with no network and no mounts unless a base file replaces it.

tent serve runs in the foreground and logs to stderr. On SIGINT or SIGTERM
it stops accepting requests and kills the sandboxes it created, unless
--keep-sandboxes is given: then their timeouts and settings stay in the
state directory (serve-state.json) for the next tent serve to take up.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runServe(c.Context(), g, o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.listen, "listen", defaultListen, "serve on `ADDR` (HOST:PORT, or unix:PATH for a unix socket)")
	f.StringVar(&o.keyFile, "api-key-file", "", "read the API key clients must send from `FILE` (- for stdin; default $TENT_API_KEY, else the state directory's serve-api-key)")
	f.StringVar(&o.apiKey, "api-key", "", "refused: a key on the command line is readable by every local user (use --api-key-file or $TENT_API_KEY)")
	_ = f.MarkHidden("api-key")
	f.StringVar(&o.templates, "templates", "", "directory of templates: tent policy files named TEMPLATE.yaml, .yml or .json")
	f.BoolVar(&o.keep, "keep-sandboxes", false, "leave the sandboxes running when the server stops")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with the certificate in `FILE` (with --tls-key)")
	f.StringVar(&o.tlsKey, "tls-key", "", "the TLS private key `FILE`")
	f.BoolVar(&o.insecure, "insecure", false, "allow plain HTTP on an address other than loopback (the API key crosses the network in clear)")
	f.StringVar(&o.domain, "domain", "", "the `DOMAIN` the SDKs' getHost(port) names (PORT-ID.DOMAIN); default localhost:PORT on a loopback address")
	f.StringVar(&o.maxUpload, "max-upload", "1G", "the bound of one file upload into a sandbox (`SIZE`, e.g. 256M, 4G), counted once gzip is decoded: past it a 413, and nothing written")
	f.BoolVar(&o.private, "private-ports", false, "every sandbox's ports need its traffic access token (e2b-traffic-access-token), as E2B's allowPublicTraffic: false")
	return c
}

// serveBackend builds the backend tent serve runs sandboxes on, what
// closes it, and whether its sandboxes outlive the server (durable): the
// supervised backend of the state directory, as every other verb's, so
// that tent ls, exec and rm see the sandboxes tent serve made and the
// other way round.
func serveBackend(g *cli.Globals, log *slog.Logger) (b *supervised.Backend, close func(context.Context) error, durable bool, err error) {
	sb := g.BackendWith(supervised.Options{Logger: log})
	return sb, func(context.Context) error { return nil }, true, nil
}

// serveRefused is tent serve's refusal of its flags or its set-up.
func serveRefused(format string, args ...any) error {
	return cli.Exit(cli.ExitRefused, fmt.Sprintf(format, args...))
}

// serveFlags are what runServe takes from its flags once checked.
type serveFlags struct {
	useTLS    bool
	maxUpload int64
	unixPath  string // the socket's path with --listen unix:PATH
	isUnix    bool
}

func runServe(ctx context.Context, g *cli.Globals, o *serveOptions) error {
	level := slog.LevelInfo
	if g.Verbose() {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	fl, err := checkServeFlags(o)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	stateDir := g.StateDir()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return serveRefused("creating the state directory: %v", err)
	}
	b, closeBackend, durable, err := serveBackend(g, log)
	if err != nil {
		return serveRefused("%v", err)
	}
	// The state directory is checked as every verb checks it
	// (supervised.ErrUnsafeStateDir), before the key is kept in it.
	if _, err := b.List(ctx); err != nil {
		_ = closeBackend(context.Background())
		return serveRefused("%v", err)
	}
	key, keyHint, err := serveAPIKey(o, stateDir, log)
	if err != nil {
		return err
	}
	var tlsConf *tls.Config
	if fl.useTLS {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return serveRefused("loading the TLS certificate: %v", err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	if o.keep && !durable {
		log.Warn("--keep-sandboxes: this backend's sandboxes live in the server's process and end with it anyway", "backend", b.Name())
	}
	var l net.Listener
	if fl.isUnix {
		l, err = listenUnix(fl.unixPath)
	} else {
		l, err = net.Listen("tcp", o.listen)
	}
	if err != nil {
		_ = closeBackend(context.Background())
		return serveRefused("%v", err)
	}
	srv, err := serve.New(b, serve.Options{APIKey: key, TemplatesDir: o.templates, Logger: log,
		StateFile:   filepath.Join(stateDir, "serve-state.json"),
		VolumesDir:  filepath.Join(stateDir, "volumes"),
		SecretsFile: filepath.Join(stateDir, "serve-secrets.json"),
		Secrets:     b.Secrets(), // the store the sandboxes' proxies ask
		Domain:      serveDomain(o.domain, l.Addr()), PrivatePorts: o.private, MaxUploadBytes: fl.maxUpload})
	if err != nil {
		l.Close()
		_ = closeBackend(context.Background())
		return serveRefused("%v", err)
	}
	scheme := "http"
	if tlsConf != nil {
		l, scheme = tls.NewListener(l, tlsConf), "https"
	}
	if !fl.isUnix && o.insecure && !fl.useTLS {
		log.Warn("serving plain HTTP on a non-loopback address: the API key and the sandboxes' tokens cross the network in clear", "addr", l.Addr())
	}
	url := scheme + "://" + l.Addr().String()
	log.Info("tent serve: listening", "addr", l.Addr().String(), "backend", b.Name(), "templates", o.templates)
	if !fl.isUnix {
		fmt.Fprintf(os.Stderr, "export E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=%s\n", url, url, keyHint)
	}

	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	serveErr := srv.Serve(sctx, l)
	log.Info("tent serve: stopping", "keep_sandboxes", o.keep)
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = errors.Join(serveErr, srv.Close(cctx, o.keep))
	if !o.keep || !durable {
		err = errors.Join(err, closeBackend(cctx))
	}
	if err != nil {
		return cli.Exit(1, err.Error())
	}
	return nil
}

// checkServeFlags checks the flags that need nothing else, in the order
// tent serve refuses them.
func checkServeFlags(o *serveOptions) (serveFlags, error) {
	fl := serveFlags{useTLS: o.tlsCert != "" || o.tlsKey != ""}
	if fl.useTLS && (o.tlsCert == "" || o.tlsKey == "") {
		return fl, serveRefused("--tls-cert and --tls-key go together")
	}
	maxUpload, err := policy.ParseSize(o.maxUpload)
	if err != nil || maxUpload <= 0 {
		return fl, serveRefused("--max-upload %q: want a size such as 256M or 4G", o.maxUpload)
	}
	fl.maxUpload = maxUpload
	fl.unixPath, fl.isUnix = strings.CutPrefix(o.listen, "unix:")
	if !fl.isUnix {
		if err := serve.CheckListenAddr(o.listen, fl.useTLS, o.insecure); err != nil {
			return fl, serveRefused("%v", err)
		}
	}
	if o.apiKey != "" {
		return fl, serveRefused("--api-key puts the key on tent's command line, which every local user can read (/proc/PID/cmdline): give it with --api-key-file FILE (mode 0600), --api-key-file - (stdin) or $TENT_API_KEY, and use a new key: this one may have been seen")
	}
	return fl, nil
}

// serveAPIKey returns the API key clients must send (from
// --api-key-file, else $TENT_API_KEY, else the one kept in stateDir,
// made the first time) and how the export line names it.
func serveAPIKey(o *serveOptions, stateDir string, log *slog.Logger) (key, keyHint string, err error) {
	key, keyHint = "", "(the key given)"
	switch {
	case o.keyFile == "-":
		line, err := bufio.NewReader(io.LimitReader(os.Stdin, 4096)).ReadString('\n')
		if key = strings.TrimSpace(line); key == "" {
			return "", "", serveRefused("--api-key-file -: no key on stdin (%v)", err)
		}
	case o.keyFile != "":
		k, err := serve.ReadAPIKeyFile(o.keyFile)
		if err != nil {
			return "", "", serveRefused("--api-key-file: %v", err)
		}
		key, keyHint = k, "$(cat "+o.keyFile+")"
	default:
		key = os.Getenv("TENT_API_KEY")
	}
	if key == "" {
		k, path, created, err := serve.LoadOrCreateAPIKey(stateDir)
		if err != nil {
			return "", "", serveRefused("%v", err)
		}
		key, keyHint = k, "$(cat "+path+")"
		if created {
			log.Info("generated an API key", "file", path)
		}
	}
	if !pythonKey.MatchString(key) {
		log.Warn("the API key is not e2b_ followed by hex digits: E2B's Python SDK refuses such keys")
	}
	return key, keyHint, nil
}

// listenUnix listens on a unix socket only its owner may connect to.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another server listens there", path)
		}
		_ = os.Remove(path) // a stale socket of an earlier server
	}
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	return l, err
}

// serveDomain is the domain getHost names: the one given, else
// localhost:PORT when the server listens on loopback (curl and browsers
// take every name under localhost for loopback), else none.
func serveDomain(given string, addr net.Addr) string {
	if given != "" {
		return given
	}
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !ta.IP.IsLoopback() {
		return ""
	}
	return "localhost:" + strconv.Itoa(ta.Port)
}
