"""Start-up code run silently in every new Python kernel of tent's Code Interpreter.

The server runs install(get_ipython(), here) once per kernel. It adds the
display formatters E2B's SDKs read: "e2b/data" (a pandas DataFrame as columns
of values), "e2b/chart" (a matplotlib Figure as the chart dict of kcharts.py)
and an "application/json" formatter that also takes plain lists and dicts; and
makes PIL's Image.show() and Image.save(path) display the image. pandas and
matplotlib are never imported here: a DataFrame or a Figure can only exist once
the user has imported them.
"""

import datetime
import json
import math
import os
import runpy
import sys


def install(ip, here):
    """Registers tent's formatters on the IPython shell ip; here is this file's dir."""
    from IPython.core.formatters import BaseFormatter, JSONFormatter
    from traitlets import ObjectName, Unicode

    charts = runpy.run_path(os.path.join(here, "kcharts.py"), run_name="_tent_ci_charts")

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            pd = sys.modules.get("pandas")
            if pd is not None and isinstance(obj, pd.DataFrame):
                return dataframe_data(obj)
            return super().__call__(obj)

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict, str)

        def __call__(self, obj):
            figure = getattr(sys.modules.get("matplotlib.figure"), "Figure", None)
            if figure is not None and isinstance(obj, figure):
                try:
                    return charts["figure_to_chart"](obj)
                except Exception:  # an odd figure: the PNG still goes out
                    return None
            return super().__call__(obj)

    class JSONAlsoPlain(JSONFormatter):
        def __call__(self, obj):
            if isinstance(obj, (list, dict)):
                try:
                    text = json.dumps(obj, allow_nan=False, default=_json_default)
                    return json.loads(text), {"expanded": True}
                except (TypeError, ValueError):
                    pass
            return super().__call__(obj)

    fmt = ip.display_formatter
    fmt.formatters["e2b/data"] = DataFormatter(parent=fmt)
    fmt.formatters["e2b/chart"] = ChartFormatter(parent=fmt)
    fmt.formatters["application/json"] = JSONAlsoPlain(parent=fmt)
    _patch_pil()


def _json_default(v):
    item = getattr(v, "item", None)  # numpy scalars
    if item is not None:
        return item()
    raise TypeError(type(v).__name__)


def cell(v):
    """A DataFrame cell as a JSON value: ISO text for times, None for NaN/NaT."""
    item = getattr(v, "item", None)
    if item is not None and type(v).__module__ == "numpy":
        v = item()
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if type(v).__name__ == "NaTType":
        return None
    if isinstance(v, (datetime.date, datetime.time)):
        try:
            return v.isoformat()
        except ValueError:  # pandas NaT
            return None
    return str(v)


def dataframe_data(df):
    """The "e2b/data" form of a DataFrame: {column: [values...]}."""
    out = {}
    for key, values in df.to_dict(orient="list").items():
        out[key if isinstance(key, str) else str(key)] = [cell(v) for v in values]
    return out


def _patch_pil():
    try:
        from PIL import Image
    except ImportError:
        return
    from IPython.display import display

    def show(self, title=None, **options):
        display(self)

    original_save = Image.Image.save

    def save(self, fp, format=None, **params):
        if isinstance(fp, (str, bytes, os.PathLike)):
            display(self)
        return original_save(self, fp, format, **params)

    Image.Image.show = show
    Image.Image.save = save


_saved_env = []


def env_push(env):
    """Sets an execution's environment variables, keeping the values they replace."""
    _saved_env.append({k: os.environ.get(k) for k in env})
    os.environ.update(env)


def env_pop():
    """Restores the variables of the last env_push."""
    saved = _saved_env.pop() if _saved_env else {}
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
