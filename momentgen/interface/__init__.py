"""How people call momentgen: the notebook API (`api`), the command line (`cli`) and the shipped configurations'
public face (`examples`)."""
