"""The studio's tabs, one module each: `layout(studio)` builds its components, `wire(studio, ui)` its events.

`studio` is the apps.studio.Studio context (runs folder, run lookup); `ui` holds every tab's components
by tab name, so an event of one tab can update another (Train's start fills Watch's run list).
"""
