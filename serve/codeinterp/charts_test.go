package codeinterp

import (
	"reflect"
	"strings"
	"testing"
)

// chartOf runs code (which shows one figure) and returns the result's chart;
// the result must carry a PNG too.
func chartOf(t *testing.T, s *server, code string) map[string]any {
	t.Helper()
	id := s.newContext(t, nil)["id"]
	lines := s.run(t, map[string]any{"code": "import matplotlib.pyplot as plt\n" + code + "\nplt.show()", "context_id": id})
	if e := ofType(lines, "error"); len(e) > 0 {
		t.Fatalf("error: %v", e)
	}
	r := ofType(lines, "result")
	if len(r) != 1 || r[0].str("png") == "" || !strings.HasPrefix(r[0].str("text"), "<Figure size") || r[0]["is_main_result"] != false {
		t.Fatalf("results %v: want one display result with png and text", r)
	}
	if extra, _ := r[0]["extra"].(map[string]any); len(extra) != 0 {
		t.Errorf("extra %v, want {}", extra)
	}
	chart, _ := r[0]["chart"].(map[string]any)
	if chart == nil {
		t.Fatalf("no chart in %v", r[0])
	}
	return chart
}

// pick returns field k of each element.
func pick(chart map[string]any, k string) []any {
	var out []any
	for _, e := range chart["elements"].([]any) {
		out = append(out, e.(map[string]any)[k])
	}
	return out
}

func wantFields(t *testing.T, chart map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if !reflect.DeepEqual(chart[k], v) {
			t.Errorf("%s = %#v, want %#v", k, chart[k], v)
		}
	}
}

func TestChartBar(t *testing.T) {
	needModules(t, "matplotlib", "numpy")
	c := chartOf(t, theServer(t), `plt.bar(['P', 'Q', 'R'], [3, 3, 7], label='Sold')
plt.xlabel('Shop'); plt.ylabel('Units [pcs]'); plt.title('Sales')`)
	wantFields(t, c, map[string]any{"type": "bar", "title": "Sales", "x_label": "Shop", "y_label": "Units [pcs]", "x_unit": nil, "y_unit": "pcs"})
	if got := pick(c, "label"); !reflect.DeepEqual(got, []any{"P", "Q", "R"}) {
		t.Errorf("labels %v", got)
	}
	if got := pick(c, "value"); !reflect.DeepEqual(got, []any{3.0, 3.0, 7.0}) {
		t.Errorf("values %v", got)
	}
	if got := pick(c, "group"); !reflect.DeepEqual(got, []any{"Sold", "Sold", "Sold"}) {
		t.Errorf("groups %v", got)
	}
}

func TestChartPie(t *testing.T) {
	needModules(t, "matplotlib", "numpy")
	c := chartOf(t, theServer(t), `fig, ax = plt.subplots()
ax.pie([70, 30], labels=['Yes', 'No'], autopct='%1.1f%%', startangle=90)
plt.title('Vote')`)
	wantFields(t, c, map[string]any{"type": "pie", "title": "Vote"})
	if got := pick(c, "angle"); !reflect.DeepEqual(got, []any{252.0, 108.0}) {
		t.Errorf("angles %v", got)
	}
	if got := pick(c, "label"); !reflect.DeepEqual(got, []any{"Yes", "No"}) {
		t.Errorf("labels %v", got)
	}
	if got := pick(c, "radius"); !reflect.DeepEqual(got, []any{1.0, 1.0}) {
		t.Errorf("radii %v", got)
	}
}

func TestChartBoxAndWhisker(t *testing.T) {
	needModules(t, "matplotlib", "numpy")
	c := chartOf(t, theServer(t), `fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 5], [10, 12, 14, 16, 18, 60, 61]], labels=['lo', 'hi'], patch_artist=True)
ax.set_title('Spread'); ax.set_xlabel('Set'); ax.set_ylabel('Value (kg)')`)
	wantFields(t, c, map[string]any{"type": "box_and_whisker", "title": "Spread", "x_label": "Set", "y_label": "Value (kg)", "x_unit": nil, "y_unit": "kg"})
	for k, want := range map[string][]any{
		"label":          {"lo", "hi"},
		"min":            {1.0, 10.0},
		"first_quartile": {2.0, 13.0},
		"median":         {3.0, 16.0},
		"third_quartile": {4.0, 39.0},
		"max":            {5.0, 61.0},
		"outliers":       {[]any{}, []any{}},
	} {
		if got := pick(c, k); !reflect.DeepEqual(got, want) {
			t.Errorf("%s %v, want %v", k, got, want)
		}
	}
	c = chartOf(t, theServer(t), `fig, ax = plt.subplots()
ax.boxplot([[10, 11, 12, 13, 14, 15, 50, 51]], labels=['one'], patch_artist=True)`)
	if got := pick(c, "outliers"); !reflect.DeepEqual(got, []any{[]any{50.0, 51.0}}) {
		t.Errorf("outliers %v, want both", got)
	}
}

func TestChartLineDatesAndScales(t *testing.T) {
	needModules(t, "matplotlib", "numpy")
	c := chartOf(t, theServer(t), `import datetime
d = [datetime.date(2024, 3, 1) + datetime.timedelta(days=i) for i in range(4)]
plt.plot(d, [1, 4, 9, 16], label='sq'); plt.plot(d, [2, 2, 2, 2])
plt.yscale('log'); plt.xlabel('Day'); plt.ylabel('Size (m)')`)
	wantFields(t, c, map[string]any{"type": "line", "title": nil, "x_scale": "datetime", "y_scale": "log", "x_unit": nil, "y_unit": "m"})
	if got := pick(c, "label"); !reflect.DeepEqual(got, []any{"sq", "Line 1"}) {
		t.Errorf("labels %v", got)
	}
	pts := c["elements"].([]any)[0].(map[string]any)["points"]
	want := []any{[]any{"2024-03-01", 1.0}, []any{"2024-03-02", 4.0}, []any{"2024-03-03", 9.0}, []any{"2024-03-04", 16.0}}
	if !reflect.DeepEqual(pts, want) {
		t.Errorf("points %v", pts)
	}
	for _, tick := range c["x_ticks"].([]any) {
		if s, ok := tick.(string); !ok || !strings.HasPrefix(s, "2024-0") {
			t.Errorf("x tick %#v, want an ISO date", tick)
		}
	}
	if len(c["x_tick_labels"].([]any)) != len(c["x_ticks"].([]any)) {
		t.Errorf("x ticks %v, labels %v", c["x_ticks"], c["x_tick_labels"])
	}
	c = chartOf(t, theServer(t), `plt.plot([1, 2, 3], ['a', 'b', 'c'])`)
	wantFields(t, c, map[string]any{"x_scale": "linear", "y_scale": "categorical", "y_ticks": []any{0.0, 1.0, 2.0}, "y_tick_labels": []any{"a", "b", "c"}})
}

func TestChartScatterSuperAndUnknown(t *testing.T) {
	needModules(t, "matplotlib", "numpy")
	s := theServer(t)
	c := chartOf(t, s, `fig, axs = plt.subplots(1, 2)
fig.suptitle('Both')
axs[0].plot([0, 1, 2], [0, 1, 0]); axs[0].set_title('L')
axs[1].scatter([1, 2], [3, 4], label='pts'); axs[1].set_xlabel('X'); axs[1].set_title('S')`)
	wantFields(t, c, map[string]any{"type": "superchart", "title": "Both"})
	if got := pick(c, "type"); !reflect.DeepEqual(got, []any{"line", "scatter"}) {
		t.Fatalf("sub-charts %v", got)
	}
	sc := c["elements"].([]any)[1].(map[string]any)
	wantFields(t, sc, map[string]any{"title": "S", "x_label": "X", "y_label": nil})
	if got := pick(sc, "points"); !reflect.DeepEqual(got, []any{[]any{[]any{1.0, 3.0}, []any{2.0, 4.0}}}) {
		t.Errorf("scatter points %v", got)
	}
	c = chartOf(t, s, `fig, ax = plt.subplots()
ax.add_artist(plt.Circle((0, 0), 1)); plt.title('Ring')`)
	wantFields(t, c, map[string]any{"type": "unknown", "title": "Ring", "elements": []any{}})
}

func TestDataFrameAndImages(t *testing.T) {
	needModules(t, "pandas", "numpy", "PIL")
	s := theServer(t)
	id := s.newContext(t, nil)["id"]
	r := ofType(s.run(t, map[string]any{"context_id": id, "code": "import pandas as pd\n" +
		"pd.DataFrame({'a': [1, 2], 't': pd.to_datetime(['2024-01-02', None]), 'f': [0.5, float('nan')]})"}), "result")
	want := map[string]any{"a": []any{1.0, 2.0}, "t": []any{"2024-01-02T00:00:00", nil}, "f": []any{0.5, nil}}
	if len(r) != 1 || !reflect.DeepEqual(r[0]["data"], want) || !strings.Contains(r[0].str("html"), "<table") {
		t.Errorf("DataFrame result %v, want data %v and html", r, want)
	}
	// PIL: show() and save(path) display the image; so does the last expression.
	lines := s.run(t, map[string]any{"context_id": id, "code": "from PIL import Image\n" +
		"im = Image.new('RGB', (4, 4))\nim.show()\nim.save('x.png')\nim"})
	r = ofType(lines, "result")
	if len(r) != 3 || r[2]["is_main_result"] != true {
		t.Fatalf("image results %v", lines)
	}
	for _, x := range r {
		if x.str("png") == "" {
			t.Errorf("no png in %v", x)
		}
	}
}
