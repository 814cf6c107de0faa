"""The local-grpo studio: a Gradio app to design rewards, start runs, watch them and export them.

The app only reads run-directory files and writes `control.json`; training runs in its own process
(`local-grpo train`) and user reward code runs in child processes with time and memory limits.
"""
