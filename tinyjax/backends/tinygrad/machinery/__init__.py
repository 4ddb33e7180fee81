"""How the backend runs a program, apart from what each primitive computes: the device (data in and out), the plan
(what runs where), realize/capture/replay with TinyJit, the rescue to XLA when a kernel does not compile, the depth
bound, and the amendments to tinygrad 0.14 with the disk cache of lowered programs. It reads the rule table, never a
rule family."""
