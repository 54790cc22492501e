"""Hydra searches the plugin directories on ``DRLMPI_PLUGIN_PATH`` after conf/ (a plugin's
``topology/<name>.yaml`` is then a choice of ``topology=``): :mod:`drlmpi.config.plugins`."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from drlmpi.config.plugins import plugin_dirs


class PluginSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for directory in plugin_dirs():
            search_path.append(provider="drlmpi-plugin", path=f"file://{directory}")
