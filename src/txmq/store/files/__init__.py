"""Files: the I/O seam every byte of the store goes through.

Owns: ``Disk``/``FileHandle`` and real files (disk.py), the simulated disk of the crash and
model tests (sim_disk.py), reserving file space before writing (space.py) and the disk reserve
given back on a full disk (ballast.py). May import: ``txmq.errors``, ``txmq.limits``, nothing
else of the store.
"""
