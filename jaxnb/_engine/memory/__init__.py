"""What fills a process's memory (engine side): readings per device and of the process, the
largest live arrays with the variables that hold them, an out-of-memory error explained."""
