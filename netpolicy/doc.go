// Package netpolicy owns tent's network policy: the modes a sandbox can run
// with and, in later work, the host-side allowlisting proxy.
//
// Today only [None] (own network namespace with loopback only) and [Host]
// (the host's network) exist; "limited" arrives with the network issue and
// is rejected by [ParseMode] until then.
package netpolicy
