package netpolicy

import (
	"strings"
	"testing"
)

// A header transform whose Template names a stored secret is filled from
// the source when each request goes out: a rotation is the next
// request's value, the answer is scrubbed of it (whole and the stored
// value alone), and a removal revokes the field; the template is checked
// at Compile.
func TestSecretHeaderTemplate(t *testing.T) {
	for _, c := range []struct {
		s    Secret
		want string
	}{
		{Secret{Name: "R", Hosts: []string{"a.example"}, Template: "Bearer ${gh}"}, "only a header transform"},
		{Secret{Name: "R", Hosts: []string{"a.example"}, Header: "X-K", Template: "Bearer gh"}, "names no stored secret"},
		{Secret{Name: "R", Hosts: []string{"a.example"}, Header: "X-K", Template: "${gh}", Value: "value-0123456"}, "beside a value"},
	} {
		if _, err := Compile(Policy{Mode: Limited, Secrets: []Secret{c.s}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.s.Template, err, c.want)
		}
	}
	src := &SecretMap{}
	o, _, c, url := sourcedProxy(t, []Secret{
		{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "Authorization", Template: "Bearer ${E2B_SECRET_gh}"},
	}, src)
	for i, v := range []string{"ghp_first-value-0123", "ghp_second-value-4567"} {
		if err := src.Set("E2B_SECRET_gh", v); err != nil {
			t.Fatal(err)
		}
		resp, body := get(t, c, url)
		if got := o.last(t); got.Auth != "Bearer "+v {
			t.Errorf("request %d: the origin received %+v, want Bearer %s", i, got, v)
		}
		if strings.Contains(body, v) || strings.Contains(resp.Header.Get("X-Echo"), v) || !strings.HasPrefix(body, "you sent tent_") {
			t.Errorf("request %d: answer %q (X-Echo %q), want the value scrubbed", i, body, resp.Header.Get("X-Echo"))
		}
	}
	src.Delete("E2B_SECRET_gh")
	get(t, c, url)
	if got := o.last(t); got.Auth != "" {
		t.Errorf("after the revocation the origin received %+v, want no Authorization", got)
	}
}
