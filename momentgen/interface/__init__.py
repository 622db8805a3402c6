"""How people call momentgen: the notebook API (`api`), the command line (`cli`) and the one validation of their
arguments (`arguments`)."""
