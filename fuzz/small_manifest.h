#pragma once
// A fixed small manifest (slices of the TaiChi-HD and COCO manifests) for targets that need
// a planner but fuzz something else.
namespace adaptiveload::fuzz {
inline constexpr const char* kSmallManifestCsv =
    "path,num_frames,height,width,fps\n"
    "taichi/u6rJiF-gPx8_80_300.mp4,220,480,640,29.97\n"
    "taichi/u6rJiF-gPx8_575_717.mp4,142,480,640,29.97\n"
    "taichi/a.mp4,81,720,1280,16\n"
    "taichi/b.mp4,300,1080,1920,30\n"
    "taichi/c.mp4,33,360,640,25\n"
    "taichi/d.mp4,64,480,854,24\n"
    "taichi/e.mp4,121,720,720,30\n"
    "taichi/f.mp4,17,240,320,15\n"
    "coco/val2017/000000397133.jpg,1,427,640,\n"
    "coco/val2017/000000037777.jpg,1,230,352,\n"
    "coco/val2017/000000252219.jpg,1,428,640,\n"
    "coco/val2017/000000087038.jpg,1,480,640,\n"
    "coco/val2017/000000174482.jpg,1,388,640,\n"
    "coco/val2017/000000403385.jpg,1,640,427,\n"
    "coco/val2017/000000006818.jpg,1,640,480,\n"
    "coco/val2017/000000480985.jpg,1,1024,1024,\n"
    "coco/val2017/000000458054.jpg,1,375,500,\n"
    "coco/val2017/000000331352.jpg,1,500,333,\n";
}  // namespace adaptiveload::fuzz
