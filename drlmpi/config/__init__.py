"""The configuration: every option's type, default, range and doc (the schema), the checks of a
command line and of a composed config, and the reference generated from them."""
