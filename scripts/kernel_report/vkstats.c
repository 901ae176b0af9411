// vkstats: SPIR-V compute shaders -> Vulkan pipelines on the first device -> the driver's
// statistics (VK_KHR_pipeline_executable_properties) as one JSON object per pipeline, and each
// internal representation (RADV: NIR, ACO IR, Assembly; NVK: NAK's) written to IRDIR/ID.<name>.txt.
// Nothing is dispatched. Part of scripts/kernel-report.sh.
//
//   vkstats IRDIR < JOBS
// One job per line, tab-separated:  ID  SPV  ENTRY  SUBGROUP  SPEC
//   SUBGROUP  varying: ALLOW_VARYING_SUBGROUP_SIZE, as wgpu 30 creates every pipeline where
//             subgroups are enabled; full: REQUIRE_FULL_SUBGROUPS, as llama.cpp creates its
//             matmuls; N: that required subgroup size
//   SPEC      specialization constants 0, 1, ... as comma-separated u32 ("-": none)
// Bindings come from the SPIR-V (DescriptorSet/Binding decorations); a push-constant block
// gets a 256-byte range.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

static PFN_vkGetInstanceProcAddr gipa;
static PFN_vkGetDeviceProcAddr gdpa;
#define IGET(inst, n) PFN_##n n = (PFN_##n)gipa(inst, #n)
#define DGET(n) PFN_##n n = (PFN_##n)gdpa(dev, #n)

static uint32_t *read_spv(const char *path, size_t *words) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); return NULL; }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint32_t *w = malloc(n);
  if (fread(w, 1, n, f) != (size_t)n) { fclose(f); free(w); return NULL; }
  fclose(f);
  *words = n / 4;
  return w;
}

typedef struct { uint32_t set, binding; VkDescriptorType type; } Bind;

// Descriptor bindings (storage and uniform buffers: all our kernels and llama.cpp's matmul
// use) and whether a push-constant block exists.
static int reflect(const uint32_t *w, size_t n, Bind *out, int max, int *push) {
  size_t bound = w[3];
  uint32_t *set = calloc(bound, 4), *bind = calloc(bound, 4), *has = calloc(bound, 4);
  uint32_t *var_sc = calloc(bound, 4), *is_var = calloc(bound, 4);
  *push = 0;
  for (size_t i = 5; i < n;) {
    uint32_t op = w[i] & 0xffff, len = w[i] >> 16;
    if (!len) break;
    const uint32_t *a = w + i + 1;
    if (op == 71 && len >= 4) {  // OpDecorate id decoration value
      if (a[1] == 34) { set[a[0]] = a[2]; has[a[0]] |= 1; }
      if (a[1] == 33) { bind[a[0]] = a[2]; has[a[0]] |= 2; }
    } else if (op == 59) {  // OpVariable type id storage-class
      var_sc[a[1]] = a[2];
      is_var[a[1]] = 1;
    }
    i += len;
  }
  int k = 0;
  for (size_t id = 0; id < bound; id++) {
    if (!is_var[id]) continue;
    if (var_sc[id] == 9) { *push = 1; continue; }
    if ((has[id] & 3) != 3 || k >= max) continue;
    if (var_sc[id] != 12 && var_sc[id] != 2) continue;
    out[k].set = set[id];
    out[k].binding = bind[id];
    out[k].type = var_sc[id] == 12 ? VK_DESCRIPTOR_TYPE_STORAGE_BUFFER : VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER;
    // (GLSL's `buffer` blocks are StorageBuffer in SPIR-V 1.3+; naga writes storage buffers
    // that way too, and uniforms as Uniform.)
    k++;
  }
  free(set); free(bind); free(has); free(var_sc); free(is_var);
  return k;
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') { putchar('\\'); putchar(*s); }
    else if ((unsigned char)*s < 32) printf("\\u%04x", *s);
    else putchar(*s);
  }
  putchar('"');
}

static void print_stat(const VkPipelineExecutableStatisticKHR *st) {
  json_str(st->name);
  putchar(':');
  switch (st->format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: printf("%s", st->value.b32 ? "true" : "false"); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: printf("%lld", (long long)st->value.i64); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: printf("%llu", (unsigned long long)st->value.u64); break;
    default: printf("%g", st->value.f64);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: vkstats IRDIR < JOBS\n"); return 2; }
  const char *irdir = argv[1];
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "vkstats: dlopen libvulkan.so.1: %s\n", dlerror()); return 2; }
  gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
  IGET(NULL, vkCreateInstance);
  VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_3 };
  VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
  VkInstance inst;
  VkResult r = vkCreateInstance(&ici, NULL, &inst);
  if (r) { fprintf(stderr, "vkstats: vkCreateInstance: %d\n", r); return 2; }
  IGET(inst, vkEnumeratePhysicalDevices);
  IGET(inst, vkGetPhysicalDeviceProperties2);
  IGET(inst, vkGetPhysicalDeviceFeatures2);
  IGET(inst, vkCreateDevice);
  IGET(inst, vkEnumerateDeviceExtensionProperties);
  gdpa = (PFN_vkGetDeviceProcAddr)gipa(inst, "vkGetDeviceProcAddr");
  uint32_t n = 1;
  VkPhysicalDevice pd;
  vkEnumeratePhysicalDevices(inst, &n, &pd);
  if (!n) { fprintf(stderr, "vkstats: no Vulkan device\n"); return 2; }
  VkPhysicalDeviceSubgroupSizeControlProperties ssp = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES };
  VkPhysicalDeviceVulkan11Properties p11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES, .pNext = &ssp };
  VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p11 };
  vkGetPhysicalDeviceProperties2(pd, &p2);
  fprintf(stderr, "vkstats: %s, subgroup %u (%u..%u)\n", p2.properties.deviceName, p11.subgroupSize,
          ssp.minSubgroupSize, ssp.maxSubgroupSize);

  // Every feature the device has in these structs, as wgpu enables the ones it uses.
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pef = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR };
  VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmf = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR, .pNext = &pef };
  VkPhysicalDeviceRobustness2FeaturesEXT rb2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT, .pNext = &cmf };
  VkPhysicalDeviceVulkan13Features f13 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES, .pNext = &rb2 };
  VkPhysicalDeviceVulkan12Features f12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &f13 };
  VkPhysicalDeviceVulkan11Features f11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12 };
  VkPhysicalDeviceFeatures2 pf2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11 };
  vkGetPhysicalDeviceFeatures2(pd, &pf2);
  if (!pef.pipelineExecutableInfo) { fprintf(stderr, "vkstats: no pipelineExecutableInfo\n"); return 2; }
  uint32_t ne = 0;
  vkEnumerateDeviceExtensionProperties(pd, NULL, &ne, NULL);
  VkExtensionProperties *ep = calloc(ne, sizeof *ep);
  vkEnumerateDeviceExtensionProperties(pd, NULL, &ne, ep);
  const char *want[] = { "VK_KHR_pipeline_executable_properties", "VK_KHR_cooperative_matrix", "VK_EXT_robustness2" };
  const char *exts[3];
  uint32_t nx = 0;
  for (int i = 0; i < 3; i++)
    for (uint32_t e = 0; e < ne; e++)
      if (!strcmp(ep[e].extensionName, want[i])) { exts[nx++] = want[i]; break; }
  if (!cmf.cooperativeMatrix) rb2.pNext = &pef;
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1, .pQueuePriorities = &prio };
  VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &pf2, .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qci, .enabledExtensionCount = nx, .ppEnabledExtensionNames = exts };
  VkDevice dev;
  r = vkCreateDevice(pd, &dci, NULL, &dev);
  if (r) { fprintf(stderr, "vkstats: vkCreateDevice: %d\n", r); return 2; }
  DGET(vkCreateShaderModule); DGET(vkCreateDescriptorSetLayout); DGET(vkCreatePipelineLayout);
  DGET(vkCreateComputePipelines); DGET(vkDestroyPipeline); DGET(vkDestroyPipelineLayout);
  DGET(vkDestroyDescriptorSetLayout); DGET(vkDestroyShaderModule);
  DGET(vkGetPipelineExecutablePropertiesKHR); DGET(vkGetPipelineExecutableStatisticsKHR);
  DGET(vkGetPipelineExecutableInternalRepresentationsKHR);

  int failures = 0;
  char line[8192];
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    char *f[5] = { 0 };
    char *save = NULL, *tok = strtok_r(line, "\t", &save);
    for (int i = 0; i < 5 && tok; i++, tok = strtok_r(NULL, "\t", &save)) f[i] = tok;
    if (!f[4]) { fprintf(stderr, "vkstats: bad job line\n"); return 2; }
    const char *id = f[0], *path = f[1], *entry = f[2], *sgmode = f[3];
    uint32_t spec[32];
    VkSpecializationMapEntry map[32];
    uint32_t nspec = 0;
    if (strcmp(f[4], "-")) {
      for (char *s = strtok_r(f[4], ",", &save); s && nspec < 32; s = strtok_r(NULL, ",", &save)) {
        map[nspec] = (VkSpecializationMapEntry){ .constantID = nspec, .offset = 4 * nspec, .size = 4 };
        spec[nspec++] = (uint32_t)strtoul(s, NULL, 10);
      }
    }
    VkSpecializationInfo si = { .mapEntryCount = nspec, .pMapEntries = map, .dataSize = 4 * nspec, .pData = spec };
    size_t nw;
    uint32_t *code = read_spv(path, &nw);
    if (!code) { failures++; continue; }
    Bind b[64];
    int push;
    int nb = reflect(code, nw, b, 64, &push);
    uint32_t maxset = 0;
    for (int i = 0; i < nb; i++)
      if (b[i].set + 1 > maxset) maxset = b[i].set + 1;
    VkDescriptorSetLayout sl[8] = { 0 };
    for (uint32_t s = 0; s < maxset && s < 8; s++) {
      VkDescriptorSetLayoutBinding lb[64];
      uint32_t k = 0;
      for (int i = 0; i < nb; i++)
        if (b[i].set == s)
          lb[k++] = (VkDescriptorSetLayoutBinding){ .binding = b[i].binding, .descriptorType = b[i].type,
                                                    .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT };
      VkDescriptorSetLayoutCreateInfo dl = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = k, .pBindings = lb };
      vkCreateDescriptorSetLayout(dev, &dl, NULL, &sl[s]);
    }
    VkPushConstantRange pcr = { VK_SHADER_STAGE_COMPUTE_BIT, 0, 256 };
    VkPipelineLayoutCreateInfo plci = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = maxset,
                                        .pSetLayouts = sl, .pushConstantRangeCount = push ? 1 : 0, .pPushConstantRanges = &pcr };
    VkPipelineLayout pl;
    vkCreatePipelineLayout(dev, &plci, NULL, &pl);
    VkShaderModuleCreateInfo smci = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = nw * 4, .pCode = code };
    VkShaderModule sm;
    vkCreateShaderModule(dev, &smci, NULL, &sm);
    uint32_t required = 0;
    VkPipelineShaderStageCreateFlags flags = 0;
    if (!strcmp(sgmode, "varying")) flags = VK_PIPELINE_SHADER_STAGE_CREATE_ALLOW_VARYING_SUBGROUP_SIZE_BIT;
    else if (!strcmp(sgmode, "full")) flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    else required = (uint32_t)atoi(sgmode);
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rss = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
                                                                .requiredSubgroupSize = required };
    VkComputePipelineCreateInfo cpci = {
      .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      .flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR | VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR,
      .stage = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .pNext = required ? &rss : NULL, .flags = flags,
                 .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = sm, .pName = entry, .pSpecializationInfo = nspec ? &si : NULL },
      .layout = pl };
    VkPipeline pipe = VK_NULL_HANDLE;
    r = vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpci, NULL, &pipe);
    printf("{\"id\":");
    json_str(id);
    printf(",\"result\":%d", r);
    if (r == VK_SUCCESS) {
      VkPipelineInfoKHR pi = { .sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = pipe };
      uint32_t nexe = 1;
      VkPipelineExecutablePropertiesKHR xp = { .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR };
      vkGetPipelineExecutablePropertiesKHR(dev, &pi, &nexe, &xp);
      printf(",\"subgroup\":%u,\"stats\":{", xp.subgroupSize);
      VkPipelineExecutableInfoKHR ei = { .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = pipe, .executableIndex = 0 };
      uint32_t ns = 0;
      vkGetPipelineExecutableStatisticsKHR(dev, &ei, &ns, NULL);
      VkPipelineExecutableStatisticKHR *st = calloc(ns, sizeof *st);
      for (uint32_t s = 0; s < ns; s++) st[s].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
      vkGetPipelineExecutableStatisticsKHR(dev, &ei, &ns, st);
      for (uint32_t s = 0; s < ns; s++) {
        if (s) putchar(',');
        print_stat(&st[s]);
      }
      putchar('}');
      free(st);
      uint32_t nr = 0;
      vkGetPipelineExecutableInternalRepresentationsKHR(dev, &ei, &nr, NULL);
      VkPipelineExecutableInternalRepresentationKHR *ir = calloc(nr, sizeof *ir);
      for (uint32_t k = 0; k < nr; k++) ir[k].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR;
      vkGetPipelineExecutableInternalRepresentationsKHR(dev, &ei, &nr, ir);
      for (uint32_t k = 0; k < nr; k++) ir[k].pData = calloc(1, ir[k].dataSize + 1);
      vkGetPipelineExecutableInternalRepresentationsKHR(dev, &ei, &nr, ir);
      printf(",\"ir\":{");
      for (uint32_t k = 0; k < nr; k++) {
        char fn[4096], nm[VK_MAX_DESCRIPTION_SIZE];
        snprintf(nm, sizeof nm, "%s", ir[k].name);
        for (char *c = nm; *c; c++)
          if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) *c = '_';
        snprintf(fn, sizeof fn, "%s/%s.%s.txt", irdir, id, nm);
        FILE *out = fopen(fn, "w");
        if (out) { fwrite(ir[k].pData, 1, strlen(ir[k].pData), out); fclose(out); }
        if (k) putchar(',');
        json_str(nm);
        putchar(':');
        json_str(fn);
        free(ir[k].pData);
      }
      putchar('}');
      free(ir);
      vkDestroyPipeline(dev, pipe, NULL);
    } else {
      failures++;
    }
    printf("}\n");
    fflush(stdout);
    vkDestroyShaderModule(dev, sm, NULL);
    vkDestroyPipelineLayout(dev, pl, NULL);
    for (uint32_t s = 0; s < maxset && s < 8; s++) vkDestroyDescriptorSetLayout(dev, sl[s], NULL);
    free(code);
  }
  return failures ? 1 : 0;
}
