"""The mitmproxy script of the installed package: ``mitmdump -s "$(tooldisco addon-path)"``.

A directory of its own because mitmproxy puts a script's directory first on ``sys.path`` while
it loads the script: here that shadows no module name of the project's or its dependencies'.
"""
