/* Mock libnvidia-ml.so.1 of the dgxspark testbed: answers NVML calls from a key=value file.
 *
 * Constants, struct layouts and error strings follow nvml.h (NVML 12.x/13.x). The data file is
 * $DGXSPARK_NVML_CONF, else /usr/lib/dgxspark-testbed/nvml.conf, read at nvmlInit:
 *   driver_loaded=1  driver_version=580.95.05  cuda_driver_version=13000  nvml_version=13.580.95.05
 *   gpu_count=1  gpu0.name=NVIDIA GB10  gpu0.uuid=GPU-...  gpu0.bus_id=0000000F:01:00.0
 *   gpu0.memory=not-supported|<MiB>  gpu0.compute=12.1  gpu0.arch=10  gpu0.pci_device_id=<hex or dec>
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10, NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12, NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17, NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18, NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20, NVML_ERROR_NO_DATA = 21, NVML_ERROR_UNKNOWN = 999
};

#define MAX_GPUS 8
#define NAME_LEN 96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

struct nvmlDevice_st {
    char name[NAME_LEN];
    char uuid[NAME_LEN];
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    long long memory_mib; /* < 0: NOT_SUPPORTED (unified memory, GB10) */
    int cc_major, cc_minor;
    unsigned int arch;
    unsigned int pci_device_id;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static struct nvmlDevice_st gpus[MAX_GPUS];
static unsigned int gpu_count;
static int init_count;
static int driver_loaded;
static char driver_version[NAME_LEN] = "";
static char nvml_version[NAME_LEN] = "";
static int cuda_driver_version;

static void copy(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static void set_gpu(unsigned int i, const char *key, const char *value) {
    struct nvmlDevice_st *g = &gpus[i];
    if (!strcmp(key, "name")) copy(g->name, sizeof g->name, value);
    else if (!strcmp(key, "uuid")) copy(g->uuid, sizeof g->uuid, value);
    else if (!strcmp(key, "bus_id")) copy(g->bus_id, sizeof g->bus_id, value);
    else if (!strcmp(key, "memory")) g->memory_mib = strcmp(value, "not-supported") ? atoll(value) : -1;
    else if (!strcmp(key, "compute")) sscanf(value, "%d.%d", &g->cc_major, &g->cc_minor);
    else if (!strcmp(key, "arch")) g->arch = (unsigned int)strtoul(value, NULL, 0);
    else if (!strcmp(key, "pci_device_id")) g->pci_device_id = (unsigned int)strtoul(value, NULL, 0);
}

static int load(void) {
    const char *path = getenv("DGXSPARK_NVML_CONF");
    char line[512];
    FILE *f = fopen(path && *path ? path : "/usr/lib/dgxspark-testbed/nvml.conf", "r");
    if (!f) return 0;
    memset(gpus, 0, sizeof gpus);
    gpu_count = 0;
    driver_loaded = 0;
    while (fgets(line, sizeof line, f)) {
        char *eq = strchr(line, '=');
        char *end = line + strcspn(line, "\r\n");
        unsigned int idx;
        int used = 0;
        *end = '\0';
        if (!eq || line[0] == '#') continue;
        *eq = '\0';
        if (!strcmp(line, "driver_loaded")) driver_loaded = atoi(eq + 1);
        else if (!strcmp(line, "driver_version")) copy(driver_version, sizeof driver_version, eq + 1);
        else if (!strcmp(line, "nvml_version")) copy(nvml_version, sizeof nvml_version, eq + 1);
        else if (!strcmp(line, "cuda_driver_version")) cuda_driver_version = atoi(eq + 1);
        else if (!strcmp(line, "gpu_count")) gpu_count = (unsigned int)atoi(eq + 1);
        else if (sscanf(line, "gpu%u.%n", &idx, &used) == 1 && used > 0 && idx < MAX_GPUS)
            set_gpu(idx, line + used, eq + 1);
    }
    fclose(f);
    if (gpu_count > MAX_GPUS) gpu_count = MAX_GPUS;
    return 1;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (init_count > 0) { init_count++; return NVML_SUCCESS; }
    if (!load()) return NVML_ERROR_UNKNOWN;
    if (!driver_loaded) return NVML_ERROR_DRIVER_NOT_LOADED;
    init_count = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

static nvmlReturn_t put_string(char *out, unsigned int length, const char *value) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

#define NEED_INIT() do { if (init_count == 0) return NVML_ERROR_UNINITIALIZED; } while (0)
#define NEED_DEVICE(d) do { NEED_INIT(); \
    if (!(d) || (d) < gpus || (d) >= gpus + gpu_count) return NVML_ERROR_INVALID_ARGUMENT; } while (0)

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    NEED_INIT();
    return put_string(version, length, driver_version);
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    NEED_INIT();
    return put_string(version, length, nvml_version);
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    NEED_INIT();
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_driver_version;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    NEED_INIT();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    NEED_INIT();
    if (!device || index >= gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    NEED_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < gpu_count; i++)
        if (!strcmp(gpus[i].uuid, uuid)) { *device = &gpus[i]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    NEED_DEVICE(device);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)(device - gpus);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    return nvmlDeviceGetIndex(device, minor);
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    NEED_DEVICE(device);
    return put_string(name, length, device->name);
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    NEED_DEVICE(device);
    return put_string(uuid, length, device->uuid);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    unsigned int domain = 0, bus = 0, dev = 0;
    NEED_DEVICE(device);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    sscanf(device->bus_id, "%x:%x:%x", &domain, &bus, &dev);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = device->pci_device_id;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", domain, bus, dev);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", domain & 0xffff, bus, dev);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(device, pci); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(device, pci); }

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    NEED_DEVICE(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->memory_mib < 0) return NVML_ERROR_NOT_SUPPORTED;
    memory->total = (unsigned long long)device->memory_mib * 1024ULL * 1024ULL;
    memory->free = memory->total;
    memory->used = 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    NEED_DEVICE(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->memory_mib < 0) return NVML_ERROR_NOT_SUPPORTED;
    memory->total = (unsigned long long)device->memory_mib * 1024ULL * 1024ULL;
    memory->reserved = 0;
    memory->free = memory->total;
    memory->used = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    NEED_DEVICE(device);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = device->cc_major;
    *minor = device->cc_minor;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch) {
    NEED_DEVICE(device);
    if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
    *arch = device->arch;
    return NVML_SUCCESS;
}
