"""The studio's tabs, one module each, and the Design tab's Check rewards panel (check_panel.py).

`layout(studio)` builds a tab's components and returns its record: a frozen dataclass of the components
its events use (DesignTab, TrainTab, WatchTab, ExportTab; CheckPanel inside DesignTab).
`wire(studio, record, ...)` adds its events, taking any other tab's record or component it reads or
updates as a named parameter (Train's start fills Watch's run and Export's run list). A handler with
several outputs returns a {component: value} dict. `studio` is the apps.tabs.common.Studio context
(runs folder, run lookup).
"""
