"""tent's chart extractor: a matplotlib Figure to the `chart` dict of E2B's SDKs.

Runs inside the kernel (loaded by kstartup.py). The shapes are those of the
SDK's charts.ts / charts.py: every chart has type, title and elements; 2D
charts add x_label, y_label, x_unit, y_unit; line and scatter charts add
ticks, tick labels and scales. Only matplotlib and numpy are used, imported
when a figure is shown.
"""

import datetime
import math
import re

_UNIT = re.compile(r"\s\((.*?)\)|\[(.*?)\]")


def figure_to_chart(fig):
    """The chart dict of fig, or None when it has nothing drawn."""
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    if not axes or not any(ax.has_data() for ax in axes):
        return None
    if len(axes) > 1:
        return {
            "type": "superchart",
            "title": _suptitle(fig),
            "elements": [axes_to_chart(ax) for ax in axes],
        }
    return axes_to_chart(axes[0])


def _suptitle(fig):
    get = getattr(fig, "get_suptitle", None)
    if get is not None:
        return get() or None
    sup = getattr(fig, "_suptitle", None)
    return (sup.get_text() or None) if sup is not None else None


def axes_to_chart(ax):
    """The chart dict of one Axes."""
    kind = chart_type(ax)
    maker = {
        "line": _line,
        "scatter": _scatter,
        "bar": _bar,
        "pie": _pie,
        "box_and_whisker": _box,
    }.get(kind)
    chart = {"type": kind, "title": ax.get_title() or None, "elements": []}
    if maker is not None:
        maker(ax, chart)
    return chart


def chart_type(ax):
    """The kind of chart ax draws, from the artists on it."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text

    children = getattr(ax, "_children", None)
    if children is None:  # older matplotlib
        children = list(ax.lines) + list(ax.patches) + list(ax.collections)
    objs = [o for o in children if not isinstance(o, Text) and _in_data(ax, o)]
    if all(isinstance(o, Line2D) for o in objs):
        return "line"
    if all(isinstance(o, (PathPatch, Line2D)) for o in objs):
        return "box_and_whisker"
    for kind, cls in (
        ("scatter", PathCollection),
        ("pie", Wedge),
        ("bar", Rectangle),
    ):
        if all(isinstance(o, cls) for o in objs):
            return kind
    return "unknown"


def _in_data(ax, artist):
    """Whether artist is drawn in data coordinates (axhline and the like are not)."""
    from matplotlib.lines import Line2D

    if not isinstance(artist, Line2D):
        return True
    return artist.get_transform() is ax.transData or not artist.is_transform_set()


def _labels(ax, chart):
    chart["x_label"] = ax.get_xlabel() or None
    chart["y_label"] = ax.get_ylabel() or None
    chart["x_unit"] = _unit(chart["x_label"])
    chart["y_unit"] = _unit(chart["y_label"])


def _unit(label):
    if not label:
        return None
    m = _UNIT.search(label)
    if not m:
        return None
    return m.group(1) if m.group(1) is not None else m.group(2)


def _converter(axis):
    get = getattr(axis, "get_converter", None)
    return get() if get else getattr(axis, "converter", None)


def _is_date_axis(axis):
    import matplotlib.dates as mdates

    kinds = tuple(
        getattr(mdates, n)
        for n in ("DateConverter", "ConciseDateConverter", "_SwitchableDateConverter")
        if hasattr(mdates, n)
    )
    return isinstance(_converter(axis), kinds)


def _scale(axis, scale):
    from matplotlib.category import StrCategoryConverter

    if _is_date_axis(axis):
        return "datetime"
    if scale != "linear":
        return scale
    if isinstance(_converter(axis), StrCategoryConverter):
        return "categorical"
    return "linear"


def _axis_info(ax, chart):
    import matplotlib.dates as mdates

    for name, axis, scale in (
        ("x", ax.xaxis, ax.get_xscale()),
        ("y", ax.yaxis, ax.get_yscale()),
    ):
        ticks = axis.get_ticklocs()
        if _is_date_axis(axis):
            chart[name + "_ticks"] = [mdates.num2date(t).isoformat() for t in ticks]
        else:
            chart[name + "_ticks"] = [_num(t) for t in ticks]
        chart[name + "_tick_labels"] = [t.get_text() for t in axis.get_ticklabels()]
        chart[name + "_scale"] = _scale(axis, scale)


def _num(v):
    """A JSON-safe float (None for NaN and infinities)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _point(v, date_axis):
    """A point's coordinate: ISO text for dates, a float for numbers, text else."""
    import numpy as np

    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, np.datetime64):
        return str(v.astype("datetime64[s]"))
    if isinstance(v, (str, np.str_)):
        return str(v)
    f = _num(v)
    if f is not None and date_axis:
        import matplotlib.dates as mdates

        return mdates.num2date(f).isoformat()
    return f


def _series_label(label, i, prefix):
    if not label or label.startswith("_"):
        m = re.match(r"_(?:child|collection|container)(\d+)$", label or "")
        return f"{prefix} {m.group(1) if m else i}"
    return label


def _line(ax, chart):
    _labels(ax, chart)
    _axis_info(ax, chart)
    xd, yd = _is_date_axis(ax.xaxis), _is_date_axis(ax.yaxis)
    lines = [ln for ln in ax.get_lines() if _in_data(ax, ln)]
    for i, ln in enumerate(lines):
        points = [
            [_point(x, xd), _point(y, yd)]
            for x, y in zip(ln.get_xdata(orig=True), ln.get_ydata(orig=True))
        ]
        label = _series_label(ln.get_label(), i, "Line")
        chart["elements"].append({"label": label, "points": points})


def _scatter(ax, chart):
    _labels(ax, chart)
    _axis_info(ax, chart)
    xd, yd = _is_date_axis(ax.xaxis), _is_date_axis(ax.yaxis)
    for i, coll in enumerate(ax.collections):
        points = [[_point(x, xd), _point(y, yd)] for x, y in coll.get_offsets()]
        label = _series_label(coll.get_label(), i, "Dataset")
        chart["elements"].append({"label": label, "points": points})


def _tick_label_at(axis, pos):
    """The tick label drawn at pos on axis, or the formatted value."""
    for loc, text in zip(axis.get_ticklocs(), axis.get_ticklabels()):
        if math.isclose(loc, pos, rel_tol=1e-9, abs_tol=1e-9):
            return text.get_text()
    return axis.get_major_formatter().format_data(pos)


def _bar(ax, chart):
    _labels(ax, chart)
    for i, cont in enumerate(ax.containers):
        if not hasattr(cont, "patches"):
            continue
        horizontal = getattr(cont, "orientation", None) == "horizontal"
        group = _series_label(cont.get_label(), i, "Group")
        values = getattr(cont, "datavalues", None)
        for j, rect in enumerate(cont.patches):
            if horizontal:
                pos, value = rect.get_y() + rect.get_height() / 2, rect.get_width()
                label = _tick_label_at(ax.yaxis, pos)
            else:
                pos, value = rect.get_x() + rect.get_width() / 2, rect.get_height()
                label = _tick_label_at(ax.xaxis, pos)
            if values is not None and j < len(values):
                value = values[j]
            chart["elements"].append({"label": label, "value": _num(value), "group": group})
    if any(getattr(c, "orientation", None) == "horizontal" for c in ax.containers):
        chart["x_label"], chart["y_label"] = chart["y_label"], chart["x_label"]
        chart["x_unit"], chart["y_unit"] = chart["y_unit"], chart["x_unit"]


def _round(v):
    """v to 10 significant digits: drops float noise such as 324.00000000000006."""
    f = _num(v)
    return None if f is None else float(f"{f:.10g}")


def _round6(v):
    """v to 6 significant digits: pie() computes its angles in float32."""
    f = _num(v)
    return None if f is None else float(f"{f:.6g}")


def _pie(ax, chart):
    from matplotlib.patches import Wedge

    for w in ax.patches:
        if isinstance(w, Wedge):
            chart["elements"].append(
                {
                    "label": w.get_label(),
                    "angle": _round6(abs(w.theta2 - w.theta1)),
                    "radius": _round6(w.r),
                }
            )


def _box(ax, chart):
    """Box plots drawn with patch_artist=True: the boxes are PathPatches."""
    from matplotlib.patches import PathPatch

    _labels(ax, chart)
    boxes = []
    for p in ax.patches:
        if isinstance(p, PathPatch):
            v = p.get_path().vertices
            boxes.append((v[:, 0].min(), v[:, 0].max(), v[:, 1].min(), v[:, 1].max()))
    lines = [
        (list(map(float, ln.get_xdata())), list(map(float, ln.get_ydata())), ln)
        for ln in ax.get_lines()
    ]
    vertical = _box_vertical(boxes, lines)
    axis = ax.xaxis if vertical else ax.yaxis
    if not vertical:
        chart["x_label"], chart["y_label"] = chart["y_label"], chart["x_label"]
        chart["x_unit"], chart["y_unit"] = chart["y_unit"], chart["x_unit"]
    for x0, x1, y0, y1 in boxes:
        if not vertical:  # work in (position, value) coordinates
            x0, x1, y0, y1 = y0, y1, x0, x1
            pts = [(ys, xs, ln) for xs, ys, ln in lines]
        else:
            pts = lines
        chart["elements"].append(_box_element(axis, x0, x1, y0, y1, pts))


def _box_vertical(boxes, lines):
    """Whether the boxes stand upright: a whisker leaves a box edge vertically."""
    for x0, x1, y0, y1 in boxes:
        cx = (x0 + x1) / 2
        for xs, ys, _ in lines:
            if len(xs) == 2 and xs[0] == xs[1] and math.isclose(xs[0], cx):
                if ys[0] in (y0, y1) or ys[1] in (y0, y1):
                    return True
    return False


def _box_element(axis, p0, p1, q1, q3, lines):
    """One box: p0..p1 its span on the position axis, q1..q3 on the value axis."""
    center = (p0 + p1) / 2
    low, high, median, best, outliers = q1, q3, None, -1.0, []
    for ps, vs, ln in lines:
        if not ps or not all(p0 - 1e-9 <= p <= p1 + 1e-9 for p in ps):
            continue
        if ln.get_linestyle() in ("None", "", " ") and all(
            math.isclose(p, center) for p in ps
        ):
            outliers.extend(_round(v) for v in vs)
        elif len(ps) == 2 and ps[0] == ps[1]:  # a whisker
            if q1 in vs:
                low = min(vs)
            elif q3 in vs:
                high = max(vs)
        elif len(ps) == 2 and vs[0] == vs[1] and q1 <= vs[0] <= q3:
            if abs(ps[1] - ps[0]) > best:  # the median spans the box, caps less
                best, median = abs(ps[1] - ps[0]), vs[0]
    return {
        "label": _tick_label_at(axis, center),
        "min": _round(low),
        "first_quartile": _round(q1),
        "median": _round(median),
        "third_quartile": _round(q3),
        "max": _round(high),
        "outliers": sorted(o for o in outliers if o is not None),
    }
