"""The side of earlylog that runs inside other people's processes when EARLYLOG is set.
Standard library only, Python 3.9+; nothing here may raise into the program, block it, or import
earlylog.read or earlylog.cli. boot.py is the entry point and lists the steps in order."""
