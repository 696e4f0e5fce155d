package supervised

import "errors"

// ErrServiceNotReady is matched (errors.Is) by the error of a Provision,
// Fork or Resume whose sandbox's service (sandbox.Spec.Service) did not
// start or was not ready within its bound: the message names the check
// that failed and quotes the end of the service's output. Nothing of the
// sandbox is left behind.
var ErrServiceNotReady = errors.New("the sandbox's service is not ready")
