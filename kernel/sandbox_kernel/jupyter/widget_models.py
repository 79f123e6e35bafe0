"""The widget models the sandbox may create in the browser, and what each one's view does with its traits.

Read from ipywidgets 8's views (@jupyter-widgets/controls 2, base 2 and output 1, packages/*/src/*.ts): a view
writes a trait as HTML only where it uses innerHTML, which is the HTML and HTMLMath `value` and, with
`description_allow_html`, the `description` of the description widgets (DescriptionView, CheckboxView); every
other string is set as text (textContent, an attribute, a class) and then typeset by MathJax where it is a label.
Image, Video and Audio fetch their `value` when `format` is 'url'. A model pairs with exactly one view (its
default), so a model cannot be drawn by another model's view. Third-party modules (SandboxKernel.widget_modules)
are trusted as a whole: their models may name any of their own views, never a view of the core modules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BASE = "@jupyter-widgets/base"
CONTROLS = "@jupyter-widgets/controls"
OUTPUT = "@jupyter-widgets/output"
CORE_VERSIONS = {BASE: "2", CONTROLS: "2", OUTPUT: "1"}  # the major version JupyterLab's widget manager ships
VERSION = re.compile(r"[0-9A-Za-z.^~*+<>=| -]{1,40}")  # a semver range as a third-party module may name one
NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.]{0,99}")  # a model or view name (a JS class name)
IDENTITY = (
    "_model_module",
    "_model_module_version",
    "_model_name",
    "_view_module",
    "_view_module_version",
    "_view_name",
)

EVERY_MODEL = frozenset({"_view_count"})  # a trait of ipywidgets' Widget itself
WIDGET = frozenset({"_dom_classes", "layout", "tabbable", "tooltip"})
DESCRIBED = WIDGET | {"description", "description_allow_html", "disabled", "style"}
SLIDER = DESCRIBED | {"behavior", "continuous_update", "max", "min", "orientation", "readout", "readout_format", "step"}
SELECTION = DESCRIBED | {"_options_labels", "index"}
BOX = WIDGET | {"box_style", "children"}
TAGS = DESCRIBED | {"allow_duplicates", "allowed_tags", "placeholder", "tag_style"}
STRING = DESCRIBED | {"placeholder"}
LAYOUT = frozenset(
    """align_content align_items align_self border_bottom border_left border_right border_top bottom display flex
    flex_flow grid_area grid_auto_columns grid_auto_flow grid_auto_rows grid_column grid_gap grid_row
    grid_template_areas grid_template_columns grid_template_rows height justify_content justify_items left margin
    max_height max_width min_height min_width object_fit object_position order overflow padding right top
    visibility width""".split()
)
FONT = frozenset({"font_family", "font_size", "font_style", "font_variant", "font_weight", "text_color"})
# Traits a link may join: numbers, booleans, dates and what inputs show as typed; never text a view draws as a
# label or HTML, a URL, a reference to another model, or a trait that decides how text is drawn.
LINKABLE = frozenset(
    """value index min max step disabled continuous_update readout orientation playing repeat interval show_repeat
    selected_index indent rows concise base""".split()
)


@dataclass(frozen=True)
class Spec:
    """One core model: its module, its one view, the traits it has and what its view does with them."""

    module: str
    view: str | None
    view_module: str
    traits: frozenset[str]
    html: frozenset[str] = frozenset()  # drawn with innerHTML
    typed: frozenset[str] = frozenset()  # shown in an input as it is (never typeset): left as typed
    binary: tuple[tuple[str | type, ...], ...] = ()  # buffer paths the view reads (a type: any key of it)
    media: bool = False  # `value` is a URL the browser fetches when `format` is 'url'
    css: bool = False  # every value is a CSS value (layout and style models)
    value_links: bool = True  # `value` is a number, boolean, date or typed text (a link may join it)

    def knows(self, trait: str) -> bool:
        return trait in self.traits or trait in EVERY_MODEL

    @property
    def linkable(self) -> frozenset[str]:
        return (LINKABLE if self.value_links else LINKABLE - {"value"}) & self.traits


def _controls(view: str | None, traits: frozenset[str], **kw: object) -> Spec:
    return Spec(CONTROLS, view, CONTROLS, traits, **kw)  # type: ignore[arg-type]


def _style(traits: frozenset[str] | set[str]) -> Spec:
    return Spec(CONTROLS, "StyleView", BASE, frozenset(traits), css=True)


_MEDIA = WIDGET | {"format", "value", "width", "height"}
MODELS: dict[str, Spec] = {
    "WidgetModel": Spec(BASE, None, BASE, frozenset()),
    "DOMWidgetModel": Spec(BASE, None, BASE, WIDGET),
    "LayoutModel": Spec(BASE, "LayoutView", BASE, LAYOUT, css=True),
    "StyleModel": Spec(BASE, "StyleView", BASE, frozenset(), css=True),
    "OutputModel": Spec(OUTPUT, "OutputView", OUTPUT, WIDGET | {"msg_id", "outputs"}, value_links=False),
    # strings
    "HTMLModel": _controls("HTMLView", STRING | {"value"}, html=frozenset({"value"}), value_links=False),
    "HTMLMathModel": _controls("HTMLMathView", STRING | {"value"}, html=frozenset({"value"}), value_links=False),
    "LabelModel": _controls("LabelView", STRING | {"value"}, value_links=False),
    "TextModel": _controls("TextView", STRING | {"value", "continuous_update"}, typed=frozenset({"value"})),
    "TextareaModel": _controls(
        "TextareaView", STRING | {"value", "continuous_update", "rows"}, typed=frozenset({"value"})
    ),
    "PasswordModel": _controls("PasswordView", STRING | {"value", "continuous_update"}, typed=frozenset({"value"})),
    "ComboboxModel": _controls(
        "ComboboxView",
        STRING | {"value", "continuous_update", "ensure_option", "options"},
        typed=frozenset({"value"}),
    ),
    # numbers
    **{
        f"{kind}SliderModel": _controls(f"{kind}SliderView", SLIDER | {"value"})
        for kind in ("Int", "Float", "IntRange", "FloatRange")
    },
    "FloatLogSliderModel": _controls("FloatLogSliderView", SLIDER | {"value", "base"}),
    "IntProgressModel": _controls("ProgressView", DESCRIBED | {"bar_style", "max", "min", "orientation", "value"}),
    "FloatProgressModel": _controls("ProgressView", DESCRIBED | {"bar_style", "max", "min", "orientation", "value"}),
    "IntTextModel": _controls("IntTextView", DESCRIBED | {"continuous_update", "step", "value"}),
    "FloatTextModel": _controls("FloatTextView", DESCRIBED | {"continuous_update", "step", "value"}),
    "BoundedIntTextModel": _controls("IntTextView", DESCRIBED | {"continuous_update", "max", "min", "step", "value"}),
    "BoundedFloatTextModel": _controls(
        "FloatTextView", DESCRIBED | {"continuous_update", "max", "min", "step", "value"}
    ),
    "PlayModel": _controls(
        "PlayView", DESCRIBED | {"interval", "max", "min", "playing", "repeat", "show_repeat", "step", "value"}
    ),
    # booleans, colours, dates
    "CheckboxModel": _controls("CheckboxView", DESCRIBED | {"indent", "value"}),
    "ToggleButtonModel": _controls("ToggleButtonView", DESCRIBED | {"button_style", "icon", "value"}),
    "ValidModel": _controls("ValidView", DESCRIBED | {"readout", "value"}),
    "ColorPickerModel": _controls("ColorPickerView", DESCRIBED | {"concise", "value"}),
    "DatePickerModel": _controls("DatePickerView", DESCRIBED | {"max", "min", "step", "value"}),
    "DatetimeModel": _controls("DatetimeView", DESCRIBED | {"max", "min", "value"}),
    "NaiveDatetimeModel": _controls("DatetimeView", DESCRIBED | {"max", "min", "value"}),
    "TimeModel": _controls("TimeView", DESCRIBED | {"max", "min", "step", "value"}),
    # buttons and uploads
    "ButtonModel": _controls("ButtonView", (DESCRIBED - {"description_allow_html"}) | {"button_style", "icon"}),
    "FileUploadModel": _controls(
        "FileUploadView",
        DESCRIBED | {"accept", "button_style", "error", "icon", "multiple", "value"},
        binary=(("value", int, "content"),),
        value_links=False,
    ),
    # selections
    "DropdownModel": _controls("DropdownView", SELECTION),
    "RadioButtonsModel": _controls("RadioButtonsView", SELECTION | {"orientation"}),
    "SelectModel": _controls("SelectView", SELECTION | {"rows"}),
    "SelectMultipleModel": _controls("SelectMultipleView", SELECTION | {"rows"}),
    "ToggleButtonsModel": _controls("ToggleButtonsView", SELECTION | {"button_style", "icons", "tooltips"}),
    "SelectionSliderModel": _controls(
        "SelectionSliderView", SELECTION | {"behavior", "continuous_update", "orientation", "readout"}
    ),
    "SelectionRangeSliderModel": _controls(
        "SelectionRangeSliderView", SELECTION | {"behavior", "continuous_update", "orientation", "readout"}
    ),
    "TagsInputModel": _controls("TagsInputView", TAGS | {"value"}, value_links=False),
    "ColorsInputModel": _controls("ColorsInputView", TAGS | {"value"}, value_links=False),
    "IntsInputModel": _controls("IntsInputView", TAGS | {"format", "max", "min", "value"}, value_links=False),
    "FloatsInputModel": _controls("FloatsInputView", TAGS | {"format", "max", "min", "value"}, value_links=False),
    # containers
    "BoxModel": _controls("BoxView", BOX),
    "HBoxModel": _controls("HBoxView", BOX),
    "VBoxModel": _controls("VBoxView", BOX),
    "GridBoxModel": _controls("GridBoxView", BOX),
    "AccordionModel": _controls("AccordionView", BOX | {"selected_index", "titles"}),
    "TabModel": _controls("TabView", BOX | {"selected_index", "titles"}),
    "StackModel": _controls("StackView", BOX | {"selected_index", "titles"}),
    # media: the browser fetches a URL value
    "ImageModel": _controls("ImageView", _MEDIA, binary=(("value",),), media=True, value_links=False),
    "VideoModel": _controls(
        "VideoView", _MEDIA | {"autoplay", "controls", "loop"}, binary=(("value",),), media=True, value_links=False
    ),
    "AudioModel": _controls(
        "AudioView",
        (_MEDIA - {"width", "height"}) | {"autoplay", "controls", "loop"},
        binary=(("value",),),
        media=True,
        value_links=False,
    ),
    # game controllers (their state comes from the browser)
    "ControllerModel": _controls(
        "ControllerView", WIDGET | {"axes", "buttons", "connected", "index", "mapping", "name", "timestamp"}
    ),
    "ControllerAxisModel": _controls("ControllerAxisView", WIDGET | {"value"}),
    "ControllerButtonModel": _controls("ControllerButtonView", WIDGET | {"pressed", "value"}),
    # links: the browser copies a trait of one model into another (jslink, jsdlink)
    "LinkModel": _controls(None, frozenset({"source", "target"})),
    "DirectionalLinkModel": _controls(None, frozenset({"source", "target"})),
    # styles (StyleView of @jupyter-widgets/base): CSS values
    "DescriptionStyleModel": _style({"description_width"}),
    "ButtonStyleModel": _style(FONT | {"button_color", "text_decoration"}),
    "CheckboxStyleModel": _style({"background", "description_width"}),
    "HTMLStyleModel": _style({"background", "description_width", "font_size", "text_color"}),
    "HTMLMathStyleModel": _style({"background", "description_width", "font_size", "text_color"}),
    "LabelStyleModel": _style(FONT | {"background", "description_width", "text_decoration"}),
    "TextStyleModel": _style({"background", "description_width", "font_size", "text_color"}),
    "ProgressStyleModel": _style({"bar_color", "description_width"}),
    "SliderStyleModel": _style({"description_width", "handle_color"}),
    "ToggleButtonStyleModel": _style(FONT | {"description_width", "text_decoration"}),
    "ToggleButtonsStyleModel": _style({"button_width", "description_width", "font_weight"}),
}
LINK_MODELS = frozenset({"LinkModel", "DirectionalLinkModel"})


@dataclass(frozen=True)
class Identity:
    """What a widget is, fixed when its comm opens: its model and its view (module, name, version)."""

    model_module: str
    model_module_version: str
    model_name: str
    view_module: str | None
    view_module_version: str | None
    view_name: str | None

    def value(self, key: str) -> str | None:
        return getattr(self, key.lstrip("_"))  # type: ignore[no-any-return]

    @property
    def spec(self) -> Spec | None:
        """The core model's entry; None for a model of a third-party module."""
        return MODELS.get(self.model_name) if self.model_module in CORE_VERSIONS else None


def identity_problem(state: dict[str, object], extra_modules: frozenset[str]) -> tuple[Identity | None, str]:
    """The identity a widget's first state names, or why it may not be created (the text of a refusal)."""
    for key in IDENTITY:
        if state.get(key) is not None and not isinstance(state.get(key), str):
            return None, f"{key} is not a string"
    name, module = state.get("_model_name"), state.get("_model_module")
    if not isinstance(name, str) or not NAME.fullmatch(name) or not isinstance(module, str):
        return None, "a widget without a valid _model_name and _model_module"
    allowed = ", ".join(sorted(set(CORE_VERSIONS) | extra_modules))
    version = state.get("_model_module_version")
    if module in CORE_VERSIONS:
        spec = MODELS.get(name)
        if spec is None or spec.module != module:
            return None, f"{module} has no model {name[:100]!r} that the sandbox may create (see docs/widgets.md)"
        view_module = state.get("_view_module", spec.view_module)
        view_name = state.get("_view_name", spec.view)
        if view_name != spec.view or (spec.view is not None and view_module != spec.view_module):
            return None, (
                f"a {name} is drawn by {spec.view_module}'s {spec.view}, not by {str(view_module)[:100]!r}'s "
                f"{str(view_name)[:100]!r} (a model may only name its own view)"
            )
        major = CORE_VERSIONS[module]
        version = state.get("_model_module_version", f"{major}.0.0")
        view_version = state.get("_view_module_version", f"{CORE_VERSIONS[spec.view_module]}.0.0")
        checked = [("_model_module_version", module, version)]
        if spec.view is not None:
            checked.append(("_view_module_version", spec.view_module, view_version))
        for key, mod, given in checked:
            if not isinstance(given, str) or not re.fullmatch(rf"{CORE_VERSIONS[mod]}\.\d+\.\d+", given):
                return None, f"{key} {str(given)[:40]!r} is not {mod} {CORE_VERSIONS[mod]}.x"
        return Identity(module, str(version), name, view_module, view_version, view_name), ""  # type: ignore[arg-type]
    if module not in extra_modules:
        return None, (
            f"widget module {module[:100]!r} is not allowed (allowed: {allowed}; add one with "
            "SandboxKernel.widget_modules)"
        )
    view_module, view_name = state.get("_view_module"), state.get("_view_name")
    if view_name is not None and (view_module not in extra_modules or not NAME.fullmatch(str(view_name))):
        return None, (
            f"widget module {module[:100]!r}'s model may be drawn only by a view of a module in "
            f"SandboxKernel.widget_modules, not by {str(view_module)[:100]!r}'s {str(view_name)[:100]!r}"
        )
    for key in ("_model_module_version", "_view_module_version"):
        given = state.get(key)
        if given is not None and not VERSION.fullmatch(str(given)):
            return None, f"{key} {str(given)[:40]!r} is not a version"
    return Identity(
        module,
        str(version or ""),
        name,
        view_module,  # type: ignore[arg-type]
        state.get("_view_module_version"),  # type: ignore[arg-type]
        view_name,  # type: ignore[arg-type]
    ), ""
