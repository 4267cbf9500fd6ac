"""Data-file formats, one module each (a detector and a reader), registered in ``registry``.

| module            | format name       | detected by |
|-------------------|-------------------|-------------|
| `mat_v5`          | `mat-v5`          | 128-byte header "MATLAB 5.0 MAT-file" |
| `mat_v73`         | `mat-v7.3`        | HDF5 with the "MATLAB 7.3 MAT-file" user block or `MATLAB_class` attributes |
| `points`          | `mutransfer-points` | HDF5 with schema="mutransfer-points" (refused by the grid readers) |
| `mutransfer_pde`  | `mutransfer`      | HDF5 with schema="mutransfer-pde" or root `input`/`output` |
| `the_well`        | `the-well`        | HDF5 with `t0_fields`/`t1_fields`/`t2_fields` and `dimensions` groups |
| `pdebench`        | `pdebench`        | HDF5 with root `tensor` and/or `*-coordinate` |
| `pdebench_groups` | `pdebench-groups` | HDF5 whose root groups hold `data` |
| `generic_hdf5`    | `hdf5`            | any other HDF5 |
| `torch_pt`        | `torch`           | zip archive holding `data.pkl`, or the legacy torch pickle magic |

``base`` holds LazyArray/DataSource/DataFormat/Probe, ``common`` the helpers the
readers share. Add a format: one module here plus one line in ``registry.REGISTRY``.
This package's ``__init__`` imports nothing, so the format modules never import it.
"""
